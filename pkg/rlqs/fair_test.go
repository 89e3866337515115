package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// TestFairShare: three Envoys at 800, 100 and 100 req/s on a 300/s bucket:
// after three report periods the global admitted rate is 300/s ±10% and
// each Envoy gets at least half its max-min fair share (100/s); then the
// 800/s Envoy drops to 50/s and within three periods every Envoy is
// admitted its whole demand. With Envoy's 5s period and with 1s, on one
// replica and on two sharing the demand store.
func TestFairShare(t *testing.T) {
	for _, tc := range []struct {
		period   time.Duration
		replicas int
	}{
		{5 * time.Second, 1},
		{time.Second, 1},
		{5 * time.Second, 2},
		{time.Second, 2},
	} {
		t.Run(fmt.Sprintf("period %v, %d replicas", tc.period, tc.replicas), func(t *testing.T) {
			c := newCluster(t, clusterOptions{period: tc.period, replicas: tc.replicas})
			var ts []*envoysim.Traffic
			for i, rate := range []float64{800, 100, 100} {
				e := c.envoy(i%tc.replicas, envoysim.Config{})
				ts = append(ts, c.fleet.Send(e, bucketA, rate))
			}
			c.run(3 * tc.period)
			got := c.admitted(2*tc.period, ts...)
			t.Logf("admitted %.1f", got)
			if total := sum(got); total < 270 || total > 330 {
				t.Errorf("admitted %v = %.1f/s, want 300 ±10%%", got, total)
			}
			for i, g := range got {
				if g < 50 {
					t.Errorf("envoy %d admitted %.1f/s, under half its fair share (100)", i, g)
				}
			}
			ts[0].SetRate(50)
			c.run(3 * tc.period)
			got = c.admitted(2*tc.period, ts...)
			for i, want := range []float64{50, 100, 100} {
				if got[i] < want*0.95 || got[i] > want*1.01 {
					t.Errorf("after the shift, envoy %d admitted %.1f/s, want its demand %v", i, got[i], want)
				}
			}
			for i, e := range c.envoys {
				t.Logf("envoy %d: %+v %v", i, e.Stats(), e.State(bucketA).Strategy)
			}
			c.checkClean()
		})
	}
}

// TestRealtime runs the simulator on the wall clock against the service,
// as the e2e tests run it against the binary. Timing on a busy machine is
// not asserted: only what holds whatever the timing (the limit and its
// burst are never exceeded, every rule kept).
func TestRealtime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 3s of wall time")
	}
	c := newCluster(t, clusterOptions{period: time.Second, replicas: 2, opts: func(o *rlqs.Options) { o.Now = nil }})
	var ts []*envoysim.Traffic
	for i, rate := range []float64{800, 100, 100} {
		e, err := envoysim.New(envoysim.Config{Domain: "d", ReportPeriod: time.Second}, envoysim.WallClock{},
			envoysim.FailoverDialer(i%2, c.replicas[0].cc, c.replicas[1].cc))
		if err != nil {
			t.Fatal(err)
		}
		c.envoys = append(c.envoys, e)
		c.fleet.Add(e)
		ts = append(ts, c.fleet.Send(e, bucketA, rate))
	}
	start := time.Now()
	c.fleet.RunRealtime(t.Context(), 3*time.Second)
	elapsed := time.Since(start).Seconds()
	total := 0.0
	for _, tr := range ts {
		total += float64(tr.Envoy.Counts(tr.Bucket).Allowed)
	}
	// Two replicas may each assign the whole limit before they read each
	// other (the general bound, R = 2), plus the buckets' first tokens.
	if limit := 2*300*1.03*elapsed + 2*300*1.03 + 3; total > limit || total < 100 {
		t.Errorf("admitted %.0f in %.1fs, want between 100 and %.0f", total, elapsed, limit)
	}
	if v := c.fleet.Violations(); v.Total() != 0 {
		t.Errorf("violations: %v", v)
	}
}
