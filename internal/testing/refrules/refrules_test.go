package refrules_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/refrules"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		name, yaml, err string // err: "" for loadable, else a part of the error
	}{
		{"reference example", `domain: mongo_cps
descriptors:
  - key: database
    value: users
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 500, name: users}
  - key: to_number
    descriptors:
      - key: x
        quota_mode: true
        value_to_metric: true
        rate_limit: {unlimited: true, replaces: [{name: users}]}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`, ""},
		{"empty file", "", ""},
		{"tenant_key", "domain: d\ntenant_key: plan\n", "line 2: unknown key 'tenant_key'"},
		{"algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: token_bucket}\n", "line 4: unknown key 'algorithm'"},
		{"metadata (after the pin)", "domain: d\ndescriptors:\n  - key: k\n    metadata: {a: 1}\n", "unknown key 'metadata'"},
		{"float", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0.5}\n", `value "0.5" is a !!float`},
		{"list of strings", "domain: d\ndescriptors: [a]\n", "list holds something other than mappings"},
		{"integer key", "domain: d\n1: x\n", "unknown key '1'"},
		{"bad yaml", "domain: [", "did not find"},
		{"alias", "x: &a {domain: d}\n", "unknown key 'x'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := refrules.Check([]byte(tc.yaml))
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, refrules.ErrNotReference) {
				t.Fatalf("Check: %v, want an error with %q", err, tc.err)
			}
		})
	}
}

// FuzzCheck proves that no input (aliases, cycles, odd tags) makes Check
// panic or loop, and that every error it returns wraps ErrNotReference.
func FuzzCheck(f *testing.F) {
	f.Add("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	f.Add("a: &x [*x]")
	f.Add("- [ {domain: 1.5} ]")
	f.Fuzz(func(t *testing.T, s string) {
		if err := refrules.Check([]byte(s)); err != nil && !errors.Is(err, refrules.ErrNotReference) {
			t.Fatalf("Check(%q): %v does not wrap ErrNotReference", s, err)
		}
	})
}
