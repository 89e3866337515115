package rlqs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// TestRequireIdentity: with RequireIdentity, a stream without an identity
// is refused Unauthenticated, and counted.
func TestRequireIdentity(t *testing.T) {
	obs := &recorder{}
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) {
		o.Identity = func(context.Context) string { return "" }
		o.RequireIdentity, o.Observer = true, obs
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := rlqspb.NewRateLimitQuotaServiceClient(c.replicas[0].cc).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d"})
	if _, err := s.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a stream without identity: %v, want Unauthenticated", err)
	}
	if n := obs.get("unidentified"); n != 1 {
		t.Errorf("%v unidentified streams counted, want 1", n)
	}
}
