package rlqs_test

import (
	"sync/atomic"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// TestStorePolicies: while the demand store fails, --rlqs-on-store-error
// decides. Two replicas: envoy 0 (800/s) on one, envoys 1 and 2 (100/s
// each) on the other, 100/s each before the outage.
func TestStorePolicies(t *testing.T) {
	const period = 5 * time.Second
	for _, tc := range []struct {
		policy rlqs.StorePolicy
		// want is each Envoy's admitted rate over two periods from the
		// time given after the outage begins.
		after time.Duration
		want  []float64
	}{
		// Keep: the last demand read holds for the grace (one TTL, 15s,
		// from the last read, up to a period before the outage).
		{rlqs.StoreKeep, 0, []float64{100, 100, 100}},
		// then each replica divides its half of the limit.
		{rlqs.StoreKeep, 15*time.Second + 2*period, []float64{150, 75, 75}},
		{rlqs.StoreSplit, 2 * period, []float64{150, 75, 75}},
		{rlqs.StoreAllow, 2 * period, []float64{800, 100, 100}},
		{rlqs.StoreDeny, 2 * period, []float64{0, 0, 0}},
	} {
		t.Run(tc.policy.String()+" after "+tc.after.String(), func(t *testing.T) {
			c := newCluster(t, clusterOptions{period: period, replicas: 2,
				opts: func(o *rlqs.Options) { o.OnStoreError, o.TTLPeriods = tc.policy, 3 }})
			var ts []*envoysim.Traffic
			for i, rate := range []float64{800, 100, 100} {
				ts = append(ts, c.fleet.Send(c.envoy([]int{0, 1, 1}[i], envoysim.Config{}), bucketA, rate))
			}
			c.run(4 * period)
			for _, r := range c.replicas {
				r.store.down.Store(true)
			}
			c.run(tc.after)
			got := c.admitted(2*period, ts...)
			for i, w := range tc.want {
				if got[i] < w*0.95-1 || got[i] > w*1.05+1 {
					t.Errorf("envoy %d admitted %.1f/s, want %v (all: %.1f)", i, got[i], w, got)
				}
			}
			c.checkClean()
		})
	}
}

// TestRuleMapping: unlimited rules assign ALLOW_ALL, limits of 0
// DENY_ALL, unmatched buckets the Unmatched answer, and buckets whose
// rule shares one counter (share_threshold) share one division.
func TestRuleMapping(t *testing.T) {
	allow, deny := typev3.RateLimitStrategy_ALLOW_ALL, typev3.RateLimitStrategy_DENY_ALL
	for _, unmatched := range []rlqs.Unmatched{rlqs.UnmatchedAllow, rlqs.UnmatchedDeny} {
		c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Unmatched = unmatched }})
		e := c.envoy(0, envoysim.Config{})
		other := c.envoy(0, envoysim.Config{Domain: "nodomain"})
		ids := []map[string]string{{"name": "free"}, {"name": "blocked"}, {"name": "nomatch"}, {"name": "a", "extra": "x"}}
		for _, id := range ids {
			c.fleet.Send(e, id, 1)
		}
		c.fleet.Send(other, bucketA, 1)
		gold := c.fleet.Send(e, map[string]string{"tier": "gold"}, 100)
		silver := c.fleet.Send(c.envoy(0, envoysim.Config{}), map[string]string{"tier": "silver"}, 100)
		c.run(3 * c.period)
		wantUnmatched := allow
		if unmatched == rlqs.UnmatchedDeny {
			wantUnmatched = deny
		}
		for i, want := range []typev3.RateLimitStrategy_BlanketRule{allow, deny, wantUnmatched, wantUnmatched} {
			if st := e.State(ids[i]).Strategy; st.GetTokenBucket() != nil || st.GetBlanketRule() != want || st == nil {
				t.Errorf("unmatched %v: bucket %v assigned %v, want %v", unmatched, ids[i], st, want)
			}
		}
		if st := other.State(bucketA).Strategy; st == nil || st.GetBlanketRule() != wantUnmatched {
			t.Errorf("unknown domain assigned %v, want %v", st, wantUnmatched)
		}
		got := c.admitted(2*c.period, gold, silver)
		if total := sum(got); total < 90 || total > 110 {
			t.Errorf("tiers sharing 100/s admitted %v = %.1f/s", got, total)
		}
		c.checkClean()
	}
}

// TestSlowLimit: a limit of 60 a minute shared by two Envoys is enforced
// with fill intervals longer than a second, at about 1/s in all.
func TestSlowLimit(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	slow := map[string]string{"name": "slow"}
	ts := []*envoysim.Traffic{
		c.fleet.Send(c.envoy(0, envoysim.Config{}), slow, 5),
		c.fleet.Send(c.envoy(0, envoysim.Config{}), slow, 5),
	}
	c.run(2 * time.Minute) // past the initial bursts (60 in all)
	got := c.admitted(2*time.Minute, ts...)
	if total := sum(got); total < 0.9 || total > 1.1 {
		t.Errorf("admitted %v = %.2f/s, want 1/s ±10%%", got, total)
	}
	if tb := c.envoys[0].State(slow).Strategy.GetTokenBucket(); tb.GetFillInterval().GetSeconds() < 2 {
		t.Errorf("assignment %v, want a fill interval of seconds", tb)
	}
	c.checkClean()
}

// TestRulesReload: when the rules change a bucket's limit, its Envoys'
// shares follow within a report period; when they move it to another rule
// (here: none), its demand leaves the old division.
func TestRulesReload(t *testing.T) {
	var rules atomic.Pointer[descriptors.Set]
	rules.Store(testRules(t))
	c := newCluster(t, clusterOptions{replicas: 2, rules: rules.Load})
	ts := []*envoysim.Traffic{
		c.fleet.Send(c.envoy(0, envoysim.Config{}), bucketA, 200),
		c.fleet.Send(c.envoy(1, envoysim.Config{}), bucketA, 200),
	}
	c.run(3 * c.period)
	if got := sum(c.admitted(2*c.period, ts...)); got < 270 || got > 330 {
		t.Fatalf("before the reload admitted %.1f/s, want 300", got)
	}
	lower, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{
		{Key: "name", Value: "a", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 100}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	rules.Store(lower)
	c.run(c.period + time.Second)
	if got := sum(c.admitted(2*c.period, ts...)); got < 90 || got > 110 {
		t.Errorf("after lowering the limit admitted %.1f/s, want 100 ±10%%", got)
	}
	none, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d"}})
	if err != nil {
		t.Fatal(err)
	}
	rules.Store(none)
	c.run(c.period + time.Second)
	if st := c.envoys[0].State(bucketA).Strategy; st.GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL || st.GetTokenBucket() != nil {
		t.Errorf("unmatched after the reload: assigned %v, want ALLOW_ALL", st)
	}
	c.checkClean()
}
