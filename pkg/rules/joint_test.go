package rules_test

import (
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// TestRateLimits: a rate_limits list holds limits of rate_limit's shape,
// each with its own fields, the descriptor's flags on all of them.
func TestRateLimits(t *testing.T) {
	r, err := rules.Parse(map[string][]byte{"plan.yaml": []byte(`
domain: api
descriptors:
  - key: account
    quota_mode: true
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - name: daily
        unit: day
        requests_per_unit: 1000
        algorithm: sliding_window
        replaces: [{name: legacy}]
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 100, algorithm: token_bucket, burst: 20, cost: 0.5}
  - key: single
    rate_limits: [{unit: hour, requests_per_unit: 3}]
`)})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Set.Domain("api")
	l := descriptors.Match(d, []descriptors.Entry{{Key: "account", Value: "a"}})
	if l == nil || len(l.Joint) != 3 {
		t.Fatalf("Match = %+v, want a joint of 3", l)
	}
	g := l.Joint
	if g[0].Unit != descriptors.Second || g[0].RequestsPerUnit != 10 || g[0].Label() != "api.account#0" {
		t.Errorf("limit 0: %s", g[0])
	}
	if g[1].Name != "daily" || g[1].Algorithm != descriptors.SlidingWindow || len(g[1].Replaces) != 1 || g[1].Label() != "api.account#daily" {
		t.Errorf("limit 1: %s", g[1])
	}
	if g[2].UnitMultiplier != 5 || g[2].Burst != 20*descriptors.Milli || g[2].Cost != 500 || g[2].Algorithm != descriptors.TokenBucket {
		t.Errorf("limit 2: %s", g[2])
	}
	for i, m := range g {
		if !m.QuotaMode || !m.Replacing() {
			t.Errorf("limit %d: quota mode %v, replacing %v", i, m.QuotaMode, m.Replacing())
		}
	}
	if one := descriptors.Match(d, []descriptors.Entry{{Key: "single", Value: "x"}}); one == nil || one.Joint != nil || one.RequestsPerUnit != 3 {
		t.Errorf("a list of one: %+v", one)
	}
	if n := len(r.Set.Limits()); n != 4 {
		t.Errorf("%d limits, want 4", n)
	}
}
