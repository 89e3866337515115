package rls

import (
	"encoding/json"
	"reflect"
	"sync"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestPassedMetadataOwnsItsMaps: merging the metadata of passed rules,
// at any depth and whichever rule brings a mapping first, writes only
// the answer's copies, never a rule's maps, and concurrent merges of the
// same rules race on nothing (the race detector watches).
func TestPassedMetadataOwnsItsMaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []string // each rule's metadata, JSON
		want  string
	}{
		{"the first rule's mapping", []string{`{"n":{"x":1}}`, `{"n":{"y":2}}`}, `{"n":{"x":1,"y":2}}`},
		{"a later rule's mapping", []string{`{"a":1}`, `{"n":{"x":1}}`, `{"n":{"y":2}}`}, `{"a":1,"n":{"x":1,"y":2}}`},
		{"deeper", []string{`{"a":1}`, `{"n":{"m":{"x":1}}}`, `{"n":{"m":{"y":2},"z":3}}`},
			`{"a":1,"n":{"m":{"x":1,"y":2},"z":3}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sts := make([]limiter.Status, len(tc.rules))
			loaded := make([]map[string]any, len(tc.rules))
			for i, js := range tc.rules {
				var md, again map[string]any
				if json.Unmarshal([]byte(js), &md) != nil || json.Unmarshal([]byte(js), &again) != nil {
					t.Fatalf("bad JSON %s", js)
				}
				sts[i] = limiter.Status{Code: limiter.OK, Limit: &descriptors.Limit{Metadata: md}}
				loaded[i] = again
			}
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 20 {
						got, err := passedMetadata(sts).GetStructValue().MarshalJSON()
						if err != nil {
							t.Error(err)
							return
						}
						if !jsonEqual(t, string(got), tc.want) {
							t.Errorf("merged %s, want %s", got, tc.want)
							return
						}
					}
				})
			}
			wg.Wait()
			for i := range sts {
				if !reflect.DeepEqual(sts[i].Limit.Metadata, loaded[i]) {
					t.Errorf("rule %d: metadata %v after the merges, loaded as %v", i, sts[i].Limit.Metadata, loaded[i])
				}
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		t.Fatalf("bad JSON %s or %s", a, b)
	}
	return reflect.DeepEqual(x, y)
}
