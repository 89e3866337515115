package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// redisStore returns a demand store on the test Redis, its keys under a
// prefix of their own, deleted at the end.
func redisStore(t *testing.T) (*demand.Redis, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), DB: 12})
	prefix := fmt.Sprintf("rlqstest%d", time.Now().UnixNano())
	t.Cleanup(func() {
		keys, _ := rdb.Keys(t.Context(), prefix+":*").Result()
		if len(keys) > 0 {
			rdb.Del(t.Context(), keys...)
		}
		_ = rdb.Close()
	})
	return demand.NewRedis(rdb), prefix
}

// TestTwoReplicasRedis: two replicas sharing one real Redis, the Envoys
// spread over both, hold the limit globally and divide it fairly.
func TestTwoReplicasRedis(t *testing.T) {
	for _, period := range []time.Duration{5 * time.Second, time.Second} {
		t.Run(period.String(), func(t *testing.T) {
			st, prefix := redisStore(t)
			c := newCluster(t, clusterOptions{period: period, replicas: 2, store: st,
				opts: func(o *rlqs.Options) { o.KeyPrefix = prefix }})
			var ts []*envoysim.Traffic
			for i, rate := range []float64{800, 100, 100, 400} {
				b := bucketA
				if i == 3 {
					b = bucketB // another bucket, on one replica only
				}
				ts = append(ts, c.fleet.Send(c.envoy(i%2, envoysim.Config{}), b, rate))
			}
			c.run(3 * period)
			got := c.admitted(2*period, ts...)
			if total := sum(got[:3]); total < 270 || total > 330 {
				t.Errorf("bucket a admitted %v = %.1f/s, want 300 ±10%%", got[:3], total)
			}
			for i, g := range got[:3] {
				if g < 50 {
					t.Errorf("envoy %d admitted %.1f/s, under half its fair share", i, g)
				}
			}
			if got[3] < 270 || got[3] > 330 {
				t.Errorf("bucket b admitted %.1f/s, want 300 ±10%%", got[3])
			}
			c.checkClean()
		})
	}
}

// TestFailover: one of two replicas dies; its Envoys reopen their streams
// on the other at their next report, their assignments holding meanwhile
// (no fallback to no_assignment_behavior), and the limit holds again
// within a TTL and three report periods, and is never exceeded by more
// than 10% in any period on the way.
func TestFailover(t *testing.T) {
	for _, period := range []time.Duration{5 * time.Second, time.Second} {
		t.Run(period.String(), func(t *testing.T) {
			c := newCluster(t, clusterOptions{period: period, replicas: 2})
			var ts []*envoysim.Traffic
			for i, rate := range []float64{800, 100, 100} {
				ts = append(ts, c.fleet.Send(c.envoy([]int{0, 1, 0}[i], envoysim.Config{}), bucketA, rate))
			}
			c.run(3 * period)
			c.kill(0)
			ttl := 3 * period
			for elapsed := time.Duration(0); elapsed < ttl+3*period; elapsed += period {
				a := c.admitted(period, ts...)
				t.Logf("%v after the kill: %.1f", elapsed, a)
				if total := sum(a); total > 330 {
					t.Errorf("%v after the kill: admitted %.1f/s, over the limit by more than 10%%", elapsed, total)
				}
			}
			got := c.admitted(2*period, ts...)
			if total := sum(got); total < 270 || total > 330 {
				t.Errorf("after failover admitted %v = %.1f/s, want 300 ±10%%", got, total)
			}
			for i, e := range c.envoys {
				if st := e.Stats(); (i != 1 && st.StreamsOpened != 2) || (i == 1 && st.StreamsOpened != 1) {
					t.Errorf("envoy %d opened %d streams", i, st.StreamsOpened)
				}
			}
			c.checkClean()
		})
	}
}

// TestFailoverLateTimer: as TestFailover at 1 s periods, with the moved
// Envoys' report timers late (1.05 s, as on a loaded machine), so that
// their first report on the new stream claims more than they held there
// (time_elapsed is truncated to whole seconds): no period after the kill
// but the first admits more than the limit +10%, whatever buckets the
// move replaced, and the first stays within docs/rlqs.md's bound (a
// replaced bucket may start full, a burst of its size).
func TestFailoverLateTimer(t *testing.T) {
	c := newCluster(t, clusterOptions{period: time.Second, replicas: 2})
	var ts []*envoysim.Traffic
	for i, rate := range []float64{800, 100, 100} {
		cfg := envoysim.Config{}
		if i != 1 {
			cfg.ReportPeriod = 1050 * time.Millisecond
		}
		ts = append(ts, c.fleet.Send(c.envoy([]int{0, 1, 0}[i], cfg), bucketA, rate))
	}
	c.run(5 * time.Second)
	replaced := make([]int, len(c.envoys))
	for i, e := range c.envoys {
		replaced[i] = e.Stats().ReplacedBuckets
	}
	c.kill(0)
	// The first second may hold the burst of a bucket the move replaced
	// (docs/rlqs.md's bound: C(1+eps)W + B(1+eps) + N for W = 1 s, C = B =
	// 300, N = 3); from the next on, the limit +10%.
	for elapsed := time.Duration(0); elapsed < 6*time.Second; elapsed += time.Second {
		a := c.admitted(time.Second, ts...)
		bound := 330.0
		if elapsed == 0 {
			bound = 300*1.0205 + 300*1.0205 + 3
		}
		if total := sum(a); total > bound {
			t.Errorf("%v after the kill: admitted %.1f = %.1f/s, over %.0f", elapsed, a, total, bound)
		}
	}
	// Buckets replaced after the kill are logged, not failed: in 3 to 5
	// of 30 runs some are (the moved Envoys' reconnection races the
	// fleet's steps), and the bound above, which counts their bursts,
	// holds in every run.
	for i, e := range c.envoys {
		if n := e.Stats().ReplacedBuckets - replaced[i]; n != 0 {
			t.Logf("envoy %d: %d token buckets replaced after the kill", i, n)
		}
	}
	c.checkClean()
}

// TestJoinLeave: an Envoy that joins gets its share within three report
// periods, and the share of one that leaves goes to the others.
func TestJoinLeave(t *testing.T) {
	c := newCluster(t, clusterOptions{replicas: 2})
	var ts []*envoysim.Traffic
	for i := range 3 {
		ts = append(ts, c.fleet.Send(c.envoy(i%2, envoysim.Config{}), bucketA, 200))
	}
	c.run(3 * c.period)
	joined := c.fleet.Send(c.envoy(1, envoysim.Config{}), bucketA, 200)
	ts = append(ts, joined)
	c.run(3 * c.period)
	got := c.admitted(2*c.period, ts...)
	if total := sum(got); total < 270 || total > 330 {
		t.Errorf("after a join admitted %v = %.1f/s, want 300 ±10%%", got, total)
	}
	for i, g := range got {
		if g < 37.5 {
			t.Errorf("after a join envoy %d admitted %.1f/s, under half its fair share (75)", i, g)
		}
	}
	c.fleet.Remove(c.envoys[0])
	ts = ts[1:]
	c.run(3 * c.period)
	got = c.admitted(2*c.period, ts...)
	if total := sum(got); total < 270 || total > 330 {
		t.Errorf("after a leave admitted %v = %.1f/s, want 300 ±10%%", got, total)
	}
	c.checkClean()
}

// TestIdleAbandoned: a bucket without requests for IdleAfter is abandoned;
// the Envoy's next request in it subscribes again and is assigned.
func TestIdleAbandoned(t *testing.T) {
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.IdleAfter = 20 * time.Second }})
	e := c.envoy(0, envoysim.Config{})
	c.fleet.Send(e, bucketA, 10)
	tb := c.fleet.Send(e, bucketB, 10)
	c.run(2 * c.period)
	tb.SetRate(0)
	c.run(15 * time.Second)
	if !e.State(bucketB).Cached {
		t.Fatal("bucket b abandoned before IdleAfter")
	}
	c.run(2 * c.period)
	if e.State(bucketB).Cached || e.Stats().Abandoned != 1 {
		t.Fatalf("bucket b not abandoned after IdleAfter: %+v", e.Stats())
	}
	if !e.State(bucketA).Cached {
		t.Fatal("busy bucket a abandoned")
	}
	tb.SetRate(10)
	c.run(c.period)
	if st := e.State(bucketB); st.Strategy.GetTokenBucket() == nil {
		t.Fatalf("bucket b after resubscribing: %+v", st)
	}
	c.checkClean()
}
