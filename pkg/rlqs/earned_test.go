package rlqs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// TestEarnedDemand: issue 29's starvation. One honest Envoy asks 80/s of
// a 100/s limit (tier=*, share_threshold) against 50 Envoys, or one Envoy
// of 50 tenant ids, each claiming 2,000/s of denied requests it never
// sends. docs/rlqs.md, "Earned demand": from the third period on, the
// honest one is admitted at least 90% of its fair share (its demand).
func TestEarnedDemand(t *testing.T) {
	for _, streams := range []int{50, 1} {
		t.Run(fmt.Sprintf("%d dishonest streams", streams), func(t *testing.T) {
			c := newCluster(t, clusterOptions{})
			honest := c.fleet.Send(c.envoy(0, envoysim.Config{}), map[string]string{"tier": "honest"}, 80)
			var liars []*envoysim.Envoy
			for range streams {
				liars = append(liars, c.envoy(0, envoysim.Config{ClaimDenied: 2000}))
			}
			for i := range 50 {
				e := liars[i%len(liars)]
				e.Request(map[string]string{"tier": fmt.Sprintf("t%d", i)})
			}
			c.run(3 * c.period)
			got := c.admitted(4*c.period, honest)[0]
			t.Logf("the honest Envoy admitted %.1f/s", got)
			if got < 0.9*80 {
				t.Errorf("the honest Envoy admitted %.1f/s, under 90%% of its demand (80/s)", got)
			}
			for i, e := range liars {
				if d := e.Stats().GapDecisions; d != 0 {
					t.Errorf("envoy %d: %d gap decisions", i, d)
				}
			}
		})
	}
}

// TestIdentity: 50 streams of one client identity count as one client: an
// Envoy of another identity gets half the limit against them, as it gets
// against one. docs/rlqs.md, "Client identity".
func TestIdentity(t *testing.T) {
	var opened atomic.Int32
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) {
		o.Identity = func(context.Context) string {
			if opened.Add(1) == 1 {
				return "spiffe://example.org/alone"
			}
			return "spiffe://example.org/crowd"
		}
	}})
	alone := c.fleet.Send(c.envoy(0, envoysim.Config{}), bucketA, 600)
	c.run(c.period / 10)
	var crowd []*envoysim.Traffic
	for range 50 {
		crowd = append(crowd, c.fleet.Send(c.envoy(0, envoysim.Config{}), bucketA, 600))
	}
	c.run(4 * c.period)
	got := c.admitted(2*c.period, append([]*envoysim.Traffic{alone}, crowd...)...)
	t.Logf("alone %.1f/s, the crowd %.1f/s", got[0], sum(got[1:]))
	if got[0] < 0.9*150 || sum(got[1:]) < 0.9*150 {
		t.Errorf("alone admitted %.1f/s, the crowd %.1f/s; want about 150/s each", got[0], sum(got[1:]))
	}
	c.checkClean()
}
