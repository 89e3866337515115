package top_test

import (
	"testing"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// TestGroupIsOneRule: a rule of several limits ranks as one rule, whichever
// of its limits decided a status.
func TestGroupIsOneRule(t *testing.T) {
	loaded, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: account\n" +
		"    rate_limits: [{unit: second, requests_per_unit: 10}, {name: daily, unit: day, requests_per_unit: 1000}]\n")})
	if err != nil {
		t.Fatal(err)
	}
	tr := top.New(top.Options{Clock: newClock()})
	tr.Loaded(loaded, true)
	entries := []descriptors.Entry{{Key: "account", Value: "a"}}
	g := descriptors.Match(loaded.Set.Domain("d"), entries).Group
	for _, l := range []*descriptors.Limit{g[0], g[1], g[1]} {
		res := &limiter.Response{Statuses: []limiter.Status{{Limit: l, Hits: 1}}}
		tr.Decided("d", view{entries}, res, 0)
	}
	a := tr.Top("d", "", top.ByHits, 0)
	if len(a.Rules) != 1 || a.Rules[0].Rule != "d.account" || a.Rules[0].Entries[0].Count != 3 {
		t.Errorf("Top = %+v, want d.account with 3 hits", a.Rules)
	}
}
