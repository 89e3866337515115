package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/envoysim"
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
