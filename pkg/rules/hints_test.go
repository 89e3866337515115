package rules_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/rules"
)

// TestBrokenFiles: the mistakes a newcomer makes first are each reported
// once, at the line that holds the mistake, with what to do.
func TestBrokenFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // the one error, whole
	}{
		{"indentation: a key", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
     requests_per_unit: 10
`}, "a.yaml:6: invalid YAML: did not find expected key; check the indentation of line 6 (5 spaces): " +
			"the keys above it are indented 6 (line 5) and 4 (line 4)"},
		{"indentation: a list item", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: b
    rate_limit:
      unit: minute
   - key: c
      requests_per_unit: 10
`}, "a.yaml:10: invalid YAML: did not find expected '-' indicator; check the indentation of line 10 (3 spaces): " +
			"the list items above it are indented 2 (line 7)"},
		{"indentation: a list item among keys", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: minute
      requests_per_unit: 10
    - key: c
`}, "a.yaml:7: invalid YAML: did not find expected key; check the indentation of line 7 (4 spaces): " +
			"the list items above it are indented 2 (line 3)"},
		{"indentation: a tab", map[string]string{"a.yaml": "domain: d\ndescriptors:\n\t- key: k\n"},
			"a.yaml:3: invalid YAML: found character that cannot start any token"},
		{"an unclosed flow mapping", map[string]string{"a.yaml": "domain: d\ndescriptors:\n" +
			"  - key: k\n    rate_limit: {unit: second,\n      requests_per_unit: 10\n  - key: other\n"},
			"a.yaml:5: invalid YAML: did not find expected ',' or '}'"},
		{"misspelt: ratelimit", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    ratelimit:
      unit: minute
      requests_per_unit: 10
`}, "a.yaml:4: unknown key 'ratelimit'; did you mean 'rate_limit'?"},
		{"misspelt: camel case", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requestsPerUnit: 10
`}, "a.yaml:6: unknown key 'requestsPerUnit'; did you mean 'requests_per_unit'?"},
		{"misspelt: algoritm", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, algoritm: token_bucket}
`}, "a.yaml:4: unknown key 'algoritm'; did you mean 'algorithm'?"},
		{"misspelt at the top: descriptor", map[string]string{"a.yaml": "domain: d\ndescriptor: []\n"},
			"a.yaml:2: unknown key 'descriptor'; did you mean 'descriptors'?"},
		{"misspelt elsewhere's key", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    tenantkey: plan\n"},
			"a.yaml:4: unknown key 'tenantkey'; did you mean 'tenant_key' (a key of a rules file's top level)?"},
		{"dedented children of an empty rate_limit", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit:
    unit: minute
    requests_per_unit: 10
`}, "a.yaml:5: rate_limit (line 4) is empty, and unit, requests_per_unit (lines 5, 6) follow at the descriptor's level: " +
			"indent them below rate_limit"},
		{"a dedented requests_per_unit", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
    requests_per_unit: 10
`}, "a.yaml:5: rate_limit has no requests_per_unit, so every request would be over the limit: set requests_per_unit " +
			"(0 to refuse every request), or unlimited: true; requests_per_unit (line 6) is outside rate_limit (line 4): " +
			"indent it below rate_limit"},
		{"a dedented unit", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit:
      requests_per_unit: 10
    unit: minute
`}, "a.yaml:4: missing rate limit unit; unit (line 6) is outside rate_limit (line 4): indent it below rate_limit"},
		{"a dedented extension", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 10
    algorithm: token_bucket
`}, "a.yaml:7: unknown key 'algorithm' in a descriptor; algorithm belongs in rate_limit (line 4): indent it below rate_limit"},
		{"an extension without rate_limit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    burst: 10\n"},
			"a.yaml:4: unknown key 'burst' in a descriptor; burst belongs in a descriptor's rate_limit"},
		{"an over-indented descriptor key", map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 10
      metadata: {team: a}
`}, "a.yaml:7: unknown key 'metadata' in a rate_limit; metadata belongs to the descriptor (line 3), beside rate_limit: indent it less"},
		{"a top-level key in a descriptor", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    atomic: true\n"},
			"a.yaml:4: unknown key 'atomic' in a descriptor; atomic belongs at the top of the rules file"},
		{"duplicate domain", map[string]string{"a.yaml": "domain: d\n", "b.yaml": "# b\ndomain: d\n"},
			"b.yaml:2: duplicate domain 'd' (first at a.yaml:1); files of one domain are merged only with " +
				"--merge-domain-config (MERGE_DOMAIN_CONFIG=true)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := map[string][]byte{}
			for name, body := range tc.files {
				in[name] = []byte(body)
			}
			_, err := rules.Parse(in)
			errs := unjoin(err)
			if len(errs) != 1 || errs[0].Error() != tc.want {
				t.Fatalf("errors:\n%v\nwant exactly:\n%s", err, tc.want)
			}
			var e *rules.Error
			if !errors.As(errs[0], &e) || !strings.HasPrefix(tc.want, e.File) {
				t.Errorf("not a *rules.Error of its file: %#v", errs[0])
			}
		})
	}
}

// TestWarningHints: a reference key where it means nothing loads, its
// warning saying where it belongs.
func TestWarningHints(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1\n      descriptors: [{key: sub}]\n",
			"a.yaml:7: 'descriptors' means nothing in a rate_limit and is ignored, as envoyproxy/ratelimit ignores it; " +
				"descriptors belongs to the descriptor (line 3), beside rate_limit: indent it less"},
		{"domain: d\ndescriptors:\n  - key: k\n    name: n\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
			"a.yaml:4: 'name' means nothing in a descriptor and is ignored, as envoyproxy/ratelimit ignores it; " +
				"name belongs in rate_limit (line 5): indent it below rate_limit"},
		{"domain: d\nkey: k\n",
			"a.yaml:2: 'key' means nothing in a rules file's top level and is ignored, as envoyproxy/ratelimit ignores it; " +
				"key belongs in a descriptor, an item of a descriptors list"},
		{"domain: d\ndescriptors:\n  - key: k\n    domain: other\n",
			"a.yaml:4: 'domain' means nothing in a descriptor and is ignored, as envoyproxy/ratelimit ignores it; " +
				"domain belongs at the top of the rules file"},
	} {
		r, err := rules.Parse(map[string][]byte{"a.yaml": []byte(tc.file)})
		if err != nil {
			t.Errorf("%q: %v", tc.file, err)
			continue
		}
		if len(r.Warnings) != 1 || r.Warnings[0].Error() != tc.want {
			t.Errorf("%q: warnings %v; want\n%s", tc.file, r.Warnings, tc.want)
		}
	}
}
