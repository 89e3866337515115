package rules_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// FuzzLoad proves that no rules file makes the loader panic, and that it
// either compiles a Set or returns positioned errors for that file.
func FuzzLoad(f *testing.F) {
	for _, glob := range []string{"*.yaml", "examples/*.yaml", "testdata/*/*.yaml", "testdata/*/*.yml"} {
		paths, err := filepath.Glob(glob)
		if err != nil {
			f.Fatal(err)
		}
		for _, path := range paths {
			b, err := os.ReadFile(path)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, s := range []string{
		"domain: a\ndescriptors: [{key: k, value: '*', rate_limit: {unit: second, requests_per_unit: 1}}]\n",
		"domain: a\ndescriptors:\n- &d {key: k}\n- <<: *d\n  value: v\n",
		"a: &a [*a, *a]\nb: &b [*a, *a]\nc: [*b, *b]\n",
		"domain: a\n? [k]\n: v\n",
		"domain: a\nx: !!binary zz\n",
		"domain: a\n---\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := rules.Parse(map[string][]byte{"f.yaml": data})
		if err == nil {
			if r == nil || r.Set == nil || len(r.Set.Domains()) != 1 {
				t.Fatalf("Parse = %+v with no error", r)
			}
			d := r.Set.Domain(r.Set.Domains()[0])
			descriptors.Match(d, []descriptors.Entry{{Key: "k", Value: "v"}, {Key: "k", Value: ""}})
			return
		}
		for _, e := range unjoin(err) {
			var ce *rules.Error
			if !errors.As(e, &ce) || ce.File != "f.yaml" || ce.Line < 0 || ce.Msg == "" {
				t.Fatalf("error %q is not a positioned *rules.Error", e)
			}
		}
	})
}
