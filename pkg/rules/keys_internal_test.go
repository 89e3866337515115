package rules

import (
	"slices"
	"strings"
	"testing"
)

// TestHomes holds homes, which says where keys belong in the hints, to
// the keys the decoder reads in each mapping: a key that is not a string
// gets an error listing them.
func TestHomes(t *testing.T) {
	for level, file := range map[string]string{
		levelFile:       "1: x\n",
		levelDescriptor: "domain: d\ndescriptors: [{1: x}]\n",
		levelRateLimit:  "domain: d\ndescriptors: [{key: k, rate_limit: {1: x}}]\n",
		levelReplaces:   "domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{1: x}]}}]\n",
	} {
		_, err := Parse(map[string][]byte{"f.yaml": []byte(file)})
		_, list, ok := strings.Cut(err.Error(), "the keys here are ")
		if !ok {
			t.Fatalf("%s: %v", level, err)
		}
		list, _, _ = strings.Cut(list, "\n")
		var want []string
		for k, hs := range homes {
			if slices.Contains(hs, level) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		if got := strings.Split(list, ", "); !slices.Equal(got, want) {
			t.Errorf("%s: the decoder reads %q, homes says %q", level, got, want)
		}
	}
}

// TestClosest: near misses find their key, others none.
func TestClosest(t *testing.T) {
	keys := []string{"rate_limit", "rate_limits", "requests_per_unit", "unit", "name", "descriptors"}
	for in, want := range map[string]string{
		"ratelimit": "rate_limit", "RateLimit": "rate_limit", "rate-limit": "rate_limit", "rate_limt": "rate_limit",
		"requestsPerUnit": "requests_per_unit", "requests_per_unti": "requests_per_unit", "nam": "name",
		"unti": "unit", "descriptor": "descriptors", "limit": "", "foo": "", "requests_per_second": "",
	} {
		if got := closest(in, keys); got != want {
			t.Errorf("closest(%q) = %q, want %q", in, got, want)
		}
	}
}
