package rules_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// refValidKeys is envoyproxy/ratelimit's set of valid keys at the pinned
// version (src/config/config_impl.go validKeys).
var refValidKeys = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit", "unlimited",
	"shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric", "share_threshold"}

// TestReferenceKeysLoad loads testdata/refkeys: a file for each key of the
// reference's valid set in each mapping where FastLimit has no use for it
// (the reference accepts any of them anywhere, and ignores those a
// mapping has no field for). Each loads, with one warning at the key's
// line, to the rules the file has without it.
func TestReferenceKeysLoad(t *testing.T) {
	paths, err := filepath.Glob("testdata/refkeys/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]bool{}
	for _, path := range paths {
		name := filepath.Base(path)
		var level, key string
		for _, l := range []string{"file", "descriptor", "rate_limit", "replaces"} {
			if k, ok := strings.CutPrefix(strings.TrimSuffix(name, ".yaml"), l+"_"); ok {
				level, key = l, k
			}
		}
		placed[level+" "+key] = true
		t.Run(name, func(t *testing.T) {
			body := files.Read(t, path)
			lines := bytes.SplitAfter(body, []byte("\n"))
			at := slices.IndexFunc(lines, func(l []byte) bool { return bytes.Contains(l, []byte("# ignored")) })
			if at < 0 || !bytes.HasPrefix(bytes.TrimSpace(lines[at]), []byte(key+":")) {
				t.Fatalf("no '%s: ...  # ignored' line", key)
			}
			r, err := rules.Parse(map[string][]byte{name: body})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := fmt.Sprintf("%s:%d: '%s' means nothing in ", name, at+1, key)
			if len(r.Warnings) != 1 || !strings.HasPrefix(r.Warnings[0].Error(), want) ||
				!strings.Contains(r.Warnings[0].Error(), "is ignored, as envoyproxy/ratelimit ignores it") {
				t.Errorf("warnings %v, want one starting %q", r.Warnings, want)
			}
			without, err := rules.Parse(map[string][]byte{name: slices.Concat(slices.Concat(lines[:at]...), slices.Concat(lines[at+1:]...))})
			if err != nil || len(without.Warnings) != 0 {
				t.Fatalf("without the key: %v, warnings %v", err, without.Warnings)
			}
			if got, want := dumpLimits(r.Set), dumpLimits(without.Set); got != want {
				t.Errorf("rules:\n%s\nwant, as without the key:\n%s", got, want)
			}
		})
	}
	// Every placement the reference accepts and FastLimit ignores has its file.
	known := map[string][]string{ // the keys FastLimit reads in each mapping
		"file":       {"domain", "descriptors"},
		"descriptor": {"key", "value", "descriptors", "rate_limit", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold"},
		"rate_limit": {"unit", "requests_per_unit", "unlimited", "name", "replaces"},
		"replaces":   {"name"},
	}
	for level, keys := range known {
		for _, k := range refValidKeys {
			if !slices.Contains(keys, k) && !placed[level+" "+k] {
				t.Errorf("no testdata/refkeys/%s_%s.yaml", level, k)
			}
		}
	}
}

// dumpLimits describes every limit of s, one line each.
func dumpLimits(s *descriptors.Set) string {
	var b strings.Builder
	for _, l := range s.Limits() {
		fmt.Fprintf(&b, "%s %d/%s unlimited=%t name=%q replaces=%q shadow=%t quota=%t detailed=%t\n", l.Path, l.RequestsPerUnit,
			l.Unit, l.Unlimited, l.Name, l.Replaces, l.ShadowMode, l.QuotaMode, l.DetailedMetric)
	}
	return b.String()
}

// TestEnvoyGatewayDump: Envoy Gateway's RateLimitConfig, as its dumps and
// tests show it (a top-level name, units in capitals, empty values and
// lists, explicit nulls), loads, its name ignored with a warning.
func TestEnvoyGatewayDump(t *testing.T) {
	dump := `name: default/eg/http
domain: default/eg/http
descriptors:
  - key: httproute/default/echo/rule/0/match/0/www_example_com
    value: httproute/default/echo/rule/0/match/0/www_example_com
    rate_limit: null
    descriptors:
      - key: default/echo-global-limit/rule/0
        value: default/echo-global-limit/rule/0
        rate_limit: null
        descriptors:
          - key: rule-0-match-0
            value: ""
            rate_limit:
              requests_per_unit: 3
              unit: MINUTE
              unlimited: false
              name: ""
              replaces: []
            descriptors: []
            shadow_mode: false
            quota_mode: false
            detailed_metric: false
            value_to_metric: false
            share_threshold: false
        shadow_mode: false
    shadow_mode: false
`
	r, err := rules.Parse(map[string][]byte{"eg.yaml": []byte(dump)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Error() != "eg.yaml:1: 'name' means nothing in a rules file's top level and is ignored, as envoyproxy/ratelimit ignores it" {
		t.Errorf("warnings %v", r.Warnings)
	}
	l := descriptors.Match(r.Set.Domain("default/eg/http"), []descriptors.Entry{
		{Key: "httproute/default/echo/rule/0/match/0/www_example_com", Value: "httproute/default/echo/rule/0/match/0/www_example_com"},
		{Key: "default/echo-global-limit/rule/0", Value: "default/echo-global-limit/rule/0"},
		{Key: "rule-0-match-0", Value: "alice"},
	})
	if l == nil || l.RequestsPerUnit != 3 || l.Unit != descriptors.Minute {
		t.Errorf("limit %+v, want 3 a minute", l)
	}
}
