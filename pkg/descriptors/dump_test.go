package descriptors_test

import (
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

func TestLimitString(t *testing.T) {
	cases := []struct {
		lim  descriptors.Limit
		want string
	}{
		{descriptors.Limit{Path: "d.k", Unit: descriptors.Minute, RequestsPerUnit: 100, UnitMultiplier: 1, Burst: 100000, Cost: 1000},
			"d.k: algorithm=fixed_window unit=MINUTE requests_per_unit=100 unit_multiplier=1 cost=1 shadow_mode=false quota_mode=false"},
		// A window has no burst: none is shown.
		{descriptors.Limit{Path: "d.s", Algorithm: descriptors.SlidingWindow, Unit: descriptors.Minute, RequestsPerUnit: 9, UnitMultiplier: 2, Burst: 9000, Cost: 1000},
			"d.s: algorithm=sliding_window unit=MINUTE requests_per_unit=9 unit_multiplier=2 cost=1 shadow_mode=false quota_mode=false"},
		{descriptors.Limit{Path: "d.k_v", Name: "n", Algorithm: descriptors.TokenBucket, Unit: descriptors.Second, RequestsPerUnit: 3,
			UnitMultiplier: 5, Burst: 7500, Cost: 250, ShadowMode: true, QuotaMode: true, Replaces: []string{"a", "b"}},
			"d.k_v: name=n algorithm=token_bucket unit=SECOND requests_per_unit=3 unit_multiplier=5 burst=7.5 cost=0.25 shadow_mode=true quota_mode=true replaces=a,b"},
		{descriptors.Limit{Path: "d.free", Unlimited: true},
			"d.free: unlimited=true shadow_mode=false quota_mode=false"},
		{descriptors.Limit{Path: "d.odd", Algorithm: descriptors.TokenBucket, Unit: descriptors.Hour, RequestsPerUnit: 1, Burst: 1001, Cost: 999},
			"d.odd: algorithm=token_bucket unit=HOUR requests_per_unit=1 unit_multiplier=1 burst=1.001 cost=0.999 shadow_mode=false quota_mode=false"},
	}
	for _, tc := range cases {
		if got := tc.lim.String(); got != tc.want {
			t.Errorf("String:\n got %s\nwant %s", got, tc.want)
		}
	}
}

func TestSetDump(t *testing.T) {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{
		Name: "d",
		Descriptors: []descriptors.Descriptor{
			{Key: "a", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 2}},
			{Key: "b", Value: "x", ShadowMode: true, Limit: &descriptors.Limit{Unit: descriptors.Day, RequestsPerUnit: 1, Cost: 500}},
			{Key: "c", Descriptors: []descriptors.Descriptor{{Key: "free", Limit: &descriptors.Limit{Unlimited: true}}}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := set.Dump(&b); err != nil {
		t.Fatal(err)
	}
	want := `d.a: algorithm=fixed_window unit=SECOND requests_per_unit=2 unit_multiplier=1 cost=1 shadow_mode=false quota_mode=false
d.b_x: algorithm=fixed_window unit=DAY requests_per_unit=1 unit_multiplier=1 cost=0.5 shadow_mode=true quota_mode=false
d.c.free: unlimited=true shadow_mode=false quota_mode=false
`
	if got := b.String(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
}
