package descriptors_test

import (
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// plan is "10 a second and 1,000 a day" on one key, the second limit named.
func plan(extra ...*descriptors.Limit) []*descriptors.Limit {
	return append([]*descriptors.Limit{
		{Unit: descriptors.Second, RequestsPerUnit: 10},
		{Name: "daily", Unit: descriptors.Day, RequestsPerUnit: 1000, Algorithm: descriptors.SlidingWindow},
	}, extra...)
}

// TestJoint: the limits of a descriptor with several compile into one
// Joint that Match reaches through its first, each with the descriptor's
// flags, its own defaults, Index and Label; Limits and Dump list each.
func TestJoint(t *testing.T) {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "api", Descriptors: []descriptors.Descriptor{
		{Key: "account", ShadowMode: true, Metadata: map[string]any{"tier": "pro"}, Limits: plan()},
		{Key: "one", Limits: []*descriptors.Limit{{Unit: descriptors.Minute, RequestsPerUnit: 5}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	l := descriptors.Match(set.Domain("api"), []descriptors.Entry{{Key: "account", Value: "a"}})
	if l == nil || len(l.Joint) != 2 || l.Joint[0] != l {
		t.Fatalf("Match = %+v, want the first of a joint of 2", l)
	}
	for i, m := range l.Joint {
		if m.Index != i || &m.Joint[0] != &l.Joint[0] || !m.ShadowMode || m.Metadata["tier"] != "pro" || m.Path != "api.account" {
			t.Errorf("limit %d: %+v", i, m)
		}
	}
	if got := []string{l.Joint[0].Label(), l.Joint[1].Label()}; got[0] != "api.account#0" || got[1] != "api.account#daily" {
		t.Errorf("labels %q", got)
	}
	if l.Joint[1].Burst != 1000*descriptors.Milli || l.Joint[1].Cost != descriptors.Milli {
		t.Errorf("defaults: burst %d cost %d", l.Joint[1].Burst, l.Joint[1].Cost)
	}
	// A list of one is a descriptor's only limit.
	if one := descriptors.Match(set.Domain("api"), []descriptors.Entry{{Key: "one", Value: "x"}}); one == nil || one.Joint != nil || one.Label() != "api.one" {
		t.Errorf("a list of one: %+v", one)
	}
	if n := len(set.Limits()); n != 3 {
		t.Errorf("%d limits, want 3", n)
	}
	var b strings.Builder
	if err := set.Dump(&b); err != nil {
		t.Fatal(err)
	}
	want := `api.account#0: algorithm=fixed_window unit=SECOND requests_per_unit=10 unit_multiplier=1 cost=1 shadow_mode=true quota_mode=false
api.account#daily: name=daily algorithm=sliding_window unit=DAY requests_per_unit=1000 unit_multiplier=1 cost=1 shadow_mode=true quota_mode=false
api.one: algorithm=fixed_window unit=MINUTE requests_per_unit=5 unit_multiplier=1 cost=1 shadow_mode=false quota_mode=false
`
	if got := b.String(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
	if l.Joint[0].Replacing() {
		t.Error("a joint without replaces is Replacing")
	}
}

// TestJointReplacing: a limit of a joint that replaces makes every limit
// of its joint Replacing.
func TestJointReplacing(t *testing.T) {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "api", Descriptors: []descriptors.Descriptor{
		{Key: "account", Limits: plan(&descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 100, Replaces: []string{"x"}})},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	l := descriptors.Match(set.Domain("api"), []descriptors.Entry{{Key: "account", Value: "a"}})
	if !l.Replacing() || !l.Joint[1].Replacing() {
		t.Error("not Replacing")
	}
}

// TestJointErrors: what rules files cannot say of several limits, said
// through the API.
func TestJointErrors(t *testing.T) {
	many := make([]*descriptors.Limit, descriptors.MaxJoint+1)
	for i := range many {
		many[i] = &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: uint32(i + 1)}
	}
	for _, tc := range []struct {
		d    descriptors.Descriptor
		want string
	}{
		{descriptors.Descriptor{Key: "k", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 1}, Limits: plan()},
			"r:3: rate_limit and rate_limits on one descriptor"},
		{descriptors.Descriptor{Key: "k", Limits: plan(nil)}, "r:3: rate_limits[2] is missing"},
		{descriptors.Descriptor{Key: "k", Limits: plan(&descriptors.Limit{Unlimited: true})},
			"r:3: rate_limits[2]: unlimited cannot be one of several limits"},
		{descriptors.Descriptor{Key: "k", Limits: plan(&descriptors.Limit{Name: "0", Unit: descriptors.Hour, RequestsPerUnit: 1})},
			"r:3: rate_limits[0] and rate_limits[2] both count as '0'"},
		{descriptors.Descriptor{Key: "k", Limits: many}, "r:3: rate_limits has 17 limits, more than 16"},
		{descriptors.Descriptor{Key: "k", Limits: plan(&descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 1, Replaces: []string{"daily"}})},
			"r:3: rate_limits[2] replaces 'daily', a limit of the same descriptor"},
		{descriptors.Descriptor{Key: "k", Limits: plan(&descriptors.Limit{RequestsPerUnit: 1})},
			"r:3: rate_limits[2]: missing rate limit unit"},
	} {
		tc.d.Source = "r:3"
		_, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{tc.d}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSet = %v, want an error with %q", err, tc.want)
		}
	}
}
