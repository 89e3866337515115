package rlqs_test

import (
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// TestSeveralLimitsOnTheFleet: a bucket whose rule has 50 a second and 600
// a minute, asked 100/s by each of two Envoys on two replicas, is divided
// as one limit of the least rate (10/s) and the least burst (50), as
// docs/rlqs.md ("Several limits") states: once settled, no window of 1 s
// or 60 s admits more than that pair's bound, which is within each limit's
// own, and a minute's window uses at least 90 % of the minute's limit.
func TestSeveralLimitsOnTheFleet(t *testing.T) {
	perSecond := &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 50}
	perMinute := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 600}
	plan := descriptors.Descriptor{Key: "plan", Limits: []*descriptors.Limit{perSecond, perMinute}}
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{plan}}})
	if err != nil {
		t.Fatal(err)
	}
	cl := newCluster(t, clusterOptions{replicas: 2, rules: func() *descriptors.Set { return set }})
	bucket := map[string]string{"plan": "p"}
	cfg := envoysim.Config{Replace: envoysim.ReplacePartial}
	ts := []*envoysim.Traffic{cl.fleet.Send(cl.envoy(0, cfg), bucket, 100), cl.fleet.Send(cl.envoy(1, cfg), bucket, 100)}

	const seconds = 150
	slots := make([]float64, 0, seconds) // admitted each second
	for range seconds {
		slots = append(slots, sum(cl.admitted(time.Second, ts...)))
	}
	cfgQ := quota.Config{}.WithDefaults()
	eps := cfgQ.Lower / (1 - cfgQ.Lower)
	const rate, burst, settle = 10.0, 50.0, 15 // the least rate and burst; settled after 3 periods
	envoys := float64(len(cl.envoys))
	for _, w := range []int{1, 60} {
		bound := rate*(1+eps)*float64(w) + burst*(1+eps) + envoys
		worst := 0.0
		for s := settle; s+w <= len(slots); s++ {
			admitted := sum(slots[s : s+w])
			worst = max(worst, admitted)
			if admitted > bound {
				t.Errorf("%d s window at %d s: admitted %.0f > %.0f", w, s, admitted, bound)
			}
			if w == 60 && admitted < 0.9*600 {
				t.Errorf("60 s window at %d s: admitted %.0f, under 90 %% of the minute's 600", s, admitted)
			}
		}
		t.Logf("%d s windows: worst %.0f of a bound of %.0f", w, worst, bound)
	}
	cl.checkClean()
}
