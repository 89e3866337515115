package rules_test

import (
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// Envoy Gateway's names for the example's route and policy
// (examples/envoy-gateway): the listener's domain, then the route, the
// policy's rule and the rule's header match.
const (
	egDomain = "default/eg/http"
	egRoute  = "httproute/default/echo/rule/0/match/0/www_example_com"
	egRule   = "default/echo-global-limit/rule/0"
	egMatch  = "rule-0-match-0"
)

// egSnapshot is a RateLimitConfig as Envoy Gateway serves it for a
// BackendTrafficPolicy limiting each x-user-id to rpu a minute.
func egSnapshot(rpu uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: egDomain, Domain: egDomain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: egRoute, Value: egRoute,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: egRule, Value: egRule,
			Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: egMatch, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
			}},
		}},
	}}}
}

// egOverlay makes the user limit of egSnapshot a token bucket of burst 20.
const egOverlay = `domains:
  - domain: default/eg/http
    descriptors:
      - key: httproute/default/echo/rule/0/match/0/www_example_com
        value: httproute/default/echo/rule/0/match/0/www_example_com
        descriptors:
          - key: default/echo-global-limit/rule/0
            value: default/echo-global-limit/rule/0
            descriptors:
              - key: rule-0-match-0
                rate_limit:
                  algorithm: token_bucket
                  burst: 20
`

func egUser(t *testing.T, r *rules.Loaded, user string) *descriptors.Limit {
	t.Helper()
	return descriptors.Match(r.Set.Domain(egDomain), []descriptors.Entry{
		{Key: egRoute, Value: egRoute}, {Key: egRule, Value: egRule}, {Key: egMatch, Value: user}})
}

func overlay(t *testing.T, body string) *rules.Overlay {
	t.Helper()
	ov, err := rules.ParseOverlay("overlay.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return ov
}

// TestOverlayEnvoyGateway: an Envoy Gateway snapshot plus an overlay is a
// token bucket rule; without the overlay, the fixed window the snapshot
// says.
func TestOverlayEnvoyGateway(t *testing.T) {
	snap := []*rlsconf.RateLimitConfig{egSnapshot(3)}
	plain, err := rules.FromXDS(snap)
	if err != nil {
		t.Fatal(err)
	}
	if l := egUser(t, plain, "alice"); l == nil || l.Algorithm != descriptors.FixedWindow || l.RequestsPerUnit != 3 {
		t.Fatalf("without the overlay: %+v, want a fixed window of 3", l)
	}
	ov := overlay(t, egOverlay)
	r, err := rules.FromXDSWith(snap, ov)
	if err != nil {
		t.Fatal(err)
	}
	l := egUser(t, r, "alice")
	if l == nil || l.Algorithm != descriptors.TokenBucket || l.Burst != 20*descriptors.Milli || l.RequestsPerUnit != 3 ||
		l.Unit != descriptors.Minute {
		t.Fatalf("with the overlay: %+v, want a token bucket of 3 a minute, burst 20", l)
	}
	if len(r.Warnings) != 0 || r.OverlayUnmatched != 0 || r.Overlay != "overlay.yaml" {
		t.Errorf("warnings %v, unmatched %d, overlay %q", r.Warnings, r.OverlayUnmatched, r.Overlay)
	}
	if r.Hash == plain.Hash {
		t.Error("the overlay does not change the hash")
	}
	other, err := rules.FromXDSWith(snap, overlay(t, strings.Replace(egOverlay, "burst: 20", "burst: 30", 1)))
	if err != nil || other.Hash == r.Hash {
		t.Errorf("another overlay: %v, same hash %t", err, other.Hash == r.Hash)
	}
	if again, _ := rules.FromXDSWith(snap, overlay(t, egOverlay)); again.Hash != r.Hash {
		t.Error("the same snapshot and overlay hash differently")
	}
}

// TestOverlayUnmatched: entries that extend nothing are warnings, counted;
// the rest applies.
func TestOverlayUnmatched(t *testing.T) {
	body := egOverlay + `  - domain: gone
  - domain: default/eg/http
    tenant_key: plan
    atomic: true
    descriptors:
      - key: httproute/default/echo/rule/0/match/0/www_example_com
        value: httproute/default/echo/rule/0/match/0/www_example_com
        rate_limit: {algorithm: sliding_window}
        descriptors:
          - key: no-such-rule
            value: x
      - key: httproute/default/echo/rule/0/match/0/www_example_com
        value: another-route
        rate_limit: {algorithm: sliding_window}
`
	r, err := rules.FromXDSWith([]*rlsconf.RateLimitConfig{egSnapshot(3)}, overlay(t, body))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"overlay.yaml:14: no domain 'gone' in the rules from xDS: nothing to extend",
		"overlay.yaml:21: descriptor default/eg/http." + egRoute + "_" + egRoute +
			" has no rate_limit in the rules from xDS: its rate_limit extensions apply to nothing",
		"overlay.yaml:23: no descriptor default/eg/http." + egRoute + "_" + egRoute + ".no-such-rule_x in the rules from xDS: nothing to extend",
		"overlay.yaml:25: no descriptor default/eg/http." + egRoute + "_another-route in the rules from xDS: nothing to extend",
	}
	var got []string
	for _, w := range r.Warnings {
		got = append(got, w.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || r.OverlayUnmatched != 4 {
		t.Errorf("warnings (%d unmatched):\n%s\nwant:\n%s", r.OverlayUnmatched, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	d := r.Set.Domain(egDomain)
	if d.TenantKey != "plan" || !d.Atomic {
		t.Errorf("domain tenant_key %q atomic %t", d.TenantKey, d.Atomic)
	}
	if l := egUser(t, r, "bob"); l == nil || l.Algorithm != descriptors.TokenBucket {
		t.Errorf("the matched entry did not apply: %+v", l)
	}
}

// TestOverlayMetadata: a descriptor's metadata carries extensions under
// "fastlimit", taken out of the metadata; the overlay overrides them
// field by field; bad ones refuse the snapshot.
func TestOverlayMetadata(t *testing.T) {
	snap := func(ext map[string]any) []*rlsconf.RateLimitConfig {
		s := egSnapshot(3)
		leaf := s.Descriptors[0].Descriptors[0].Descriptors[0]
		md := map[string]any{"team": "payments", "fastlimit": ext}
		st, err := structpb.NewStruct(md)
		if err != nil {
			t.Fatal(err)
		}
		leaf.Metadata = st
		return []*rlsconf.RateLimitConfig{s}
	}
	r, err := rules.FromXDS(snap(map[string]any{"rate_limit": map[string]any{"algorithm": "sliding_window", "cost": 0.5}}))
	if err != nil {
		t.Fatal(err)
	}
	l := egUser(t, r, "alice")
	if l == nil || l.Algorithm != descriptors.SlidingWindow || l.Cost != 500 {
		t.Fatalf("from metadata: %+v, want a sliding window costing 0.5", l)
	}
	if md := l.Metadata; len(md) != 1 || md["team"] != "payments" {
		t.Errorf("metadata %v, want only team (fastlimit taken out)", md)
	}
	r, err = rules.FromXDSWith(snap(map[string]any{"rate_limit": map[string]any{"algorithm": "sliding_window", "cost": 0.5}}),
		overlay(t, egOverlay))
	if l := egUser(t, r, "alice"); err != nil || l.Algorithm != descriptors.TokenBucket || l.Cost != 500 {
		t.Errorf("metadata and overlay: %+v %v, want the overlay's token bucket and the metadata's cost", l, err)
	}
	r, err = rules.FromXDS(snap(map[string]any{"rate_limit": map[string]any{"charge": "always"}}))
	if l := egUser(t, r, "alice"); err != nil || l.Charge != descriptors.ChargeAlways {
		t.Errorf("charge from metadata: %+v %v, want charged always", l, err)
	}
	for _, tc := range []struct {
		ext  map[string]any
		want string
	}{
		{map[string]any{"rate_limit": map[string]any{"charge": "sometimes"}}, "metadata.fastlimit: unknown charge 'sometimes'"},
		{map[string]any{"rate_limit": map[string]any{"algorithm": "leaky"}}, "metadata.fastlimit: unknown algorithm 'leaky'"},
		{map[string]any{"rate_limit": map[string]any{"unit": "second"}}, "metadata.fastlimit: the overlay holds FastLimit's extensions only: unit comes from the rules over xDS"},
		{map[string]any{"algoritm": "x"}, "metadata.fastlimit: unknown key 'algoritm'"},
		{map[string]any{"rate_limit": map[string]any{"burst": 2}}, "metadata.fastlimit: burst needs algorithm: token_bucket"},
	} {
		_, err := rules.FromXDS(snap(tc.ext))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "resource '"+egDomain+"' descriptor") {
			t.Errorf("%v: %v, want %q naming the descriptor", tc.ext, err, tc.want)
		}
	}
}

// TestOverlayErrors: an overlay is parsed strictly, each error at its
// line.
func TestOverlayErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {unit: second}\n",
			"overlay.yaml:5: the overlay holds FastLimit's extensions only: unit comes from the rules over xDS"},
		{"domains:\n  - domain: d\n    descriptors:\n      - key: k\n        shadow_mode: true\n",
			"overlay.yaml:5: the overlay holds FastLimit's extensions only: shadow_mode comes from the rules over xDS"},
		{"domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {burst: 5}\n",
			"overlay.yaml:5: burst needs algorithm: token_bucket"},
		{"domains:\n  - domain: d\n    descriptors:\n      - key: k\n        ratelimit: {algorithm: token_bucket}\n",
			"overlay.yaml:5: unknown key 'ratelimit'; did you mean 'rate_limit'?"},
		{"domains:\n  - domain: d\n    descriptors:\n      - key: k\n        name: x\n",
			"overlay.yaml:5: unknown key 'name' in a descriptor; name belongs in a descriptor's rate_limit"},
		{"domains:\n  - descriptors: []\n", "overlay.yaml:2: overlay domain: domain is missing or empty"},
		{"domains:\n  - domain: d\n    descriptors:\n      - value: v\n", "overlay.yaml:4: overlay descriptor: key is missing or empty"},
		{"domain: d\n", "overlay.yaml:1: unknown key 'domain' in a rules overlay"},
		{"domains:\n  - domain: d\n   descriptors: []\n", "overlay.yaml:3: invalid YAML: did not find expected '-' indicator; " +
			"check the indentation of line 3 (3 spaces)"},
		{"domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {algorithm: token_bucket, burst: 0}\n",
			"overlay.yaml:5: burst must be positive"},
	} {
		_, err := rules.ParseOverlay("overlay.yaml", []byte(tc.body))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
	if ov, err := rules.ParseOverlay("empty.yaml", nil); err != nil || ov.Domains() != 0 {
		t.Errorf("an empty overlay: %v, %v", ov, err)
	}
}

// TestOverlayInvalidTogether: an overlay that makes a snapshot's rule
// invalid refuses the snapshot, naming the overlay's line.
func TestOverlayInvalidTogether(t *testing.T) {
	_, err := rules.FromXDSWith([]*rlsconf.RateLimitConfig{egSnapshot(0)}, overlay(t, egOverlay))
	want := "(extended by overlay.yaml:10): token_bucket needs requests_per_unit above 0"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("FromXDSWith = %v, want an error with %q", err, want)
	}
}
