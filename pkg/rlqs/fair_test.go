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
// admitted its whole demand. On one replica and on two sharing the
// demand store.
func TestFairShare(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			c := newCluster(t, clusterOptions{replicas: replicas})
			var ts []*envoysim.Traffic
			for i, rate := range []float64{800, 100, 100} {
				e := c.envoy(i%replicas, envoysim.Config{})
				ts = append(ts, c.fleet.Send(e, bucketA, rate))
			}
			c.run(3 * c.period)
			got := c.admitted(2*c.period, ts...)
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
			c.run(3 * c.period)
			got = c.admitted(2*c.period, ts...)
			for i, want := range []float64{50, 100, 100} {
				if got[i] < want*0.95 || got[i] > want*1.01 {
					t.Errorf("after the shift, envoy %d admitted %.1f/s, want its demand %v", i, got[i], want)
				}
			}
			c.checkClean()
		})
	}
}

// TestMovedCredit: issue 36's case. An Envoy asking 100/s holds a 100/s
// limit (tier=*) through replica 0; another, asking 500/s of the same
// bucket through replica 1 alone while it is down, admits all by
// no_assignment_behavior, its subscription and a report lost, then names
// the bucket on its first stream with a time_elapsed of 5 s and 2,500
// allowed: no one was assigned that for it, so it is credited nothing,
// and 3 s and 8 s after that report it admits at most its fair share
// +10% (55/s), the two at most 110/s.
func TestMovedCredit(t *testing.T) {
	c := newCluster(t, clusterOptions{replicas: 2})
	honest := c.fleet.Send(c.envoy(0, envoysim.Config{}), map[string]string{"tier": "x"}, 100)
	c.run(2 * c.period)
	c.replicas[1].sw.Refuse()
	c.down(1)
	late := c.envoyOn([]int{1}, envoysim.Config{})
	moved := c.fleet.Send(late, map[string]string{"tier": "x"}, 500)
	c.run(c.period + c.period/2)
	c.replicas[1].sw.Restore()
	c.up(1)
	first := late.NextReport() // its first report that reaches replica 1
	c.run(first.Sub(c.clock.Now()) + 3*time.Second)
	for _, after := range []time.Duration{3 * time.Second, 8 * time.Second} {
		c.run(first.Add(after).Sub(c.clock.Now()))
		got := c.admitted(time.Second, honest, moved)
		t.Logf("%v after its first report: %.1f", after, got)
		if got[1] > 55 || sum(got) > 110 {
			t.Errorf("%v after its first report the late Envoy admitted %.1f/s, both %.1f/s: want at most 55 and 110", after, got[1], sum(got))
		}
	}
	if st := late.Stats(); st.StreamsOpened == 0 || !late.Connected() {
		t.Errorf("the late Envoy did not reach replica 1: %+v", st)
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
