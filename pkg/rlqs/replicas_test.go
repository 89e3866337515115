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
	st, prefix := redisStore(t)
	c := newCluster(t, clusterOptions{replicas: 2, store: st, opts: func(o *rlqs.Options) { o.KeyPrefix = prefix }})
	var ts []*envoysim.Traffic
	for i, rate := range []float64{800, 100, 100, 400} {
		b := bucketA
		if i == 3 {
			b = bucketB // another bucket, on one replica only
		}
		ts = append(ts, c.fleet.Send(c.envoy(i%2, envoysim.Config{}), b, rate))
	}
	c.run(3 * c.period)
	got := c.admitted(2*c.period, ts...)
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
}

// TestFailover: one of two replicas dies; its Envoys reopen their streams
// on the other at a later report (the first may still go to the dead one,
// whose health checks have not yet found it down: that report is lost),
// their assignments holding meanwhile (no fallback to
// no_assignment_behavior), and the limit holds within 10% in every
// period, their token buckets kept.
func TestFailover(t *testing.T) {
	c := newCluster(t, clusterOptions{replicas: 2})
	var ts []*envoysim.Traffic
	for i, rate := range []float64{800, 100, 100} {
		ts = append(ts, c.fleet.Send(c.envoy([]int{0, 1, 0}[i], envoysim.Config{}), bucketA, rate))
	}
	c.run(3 * c.period)
	replaced := c.replaced()
	c.kill(0)
	for elapsed := time.Duration(0); elapsed < 5*c.period; elapsed += c.period {
		a := c.admitted(c.period, ts...)
		t.Logf("%v after the kill: %.1f", elapsed, a)
		if total := sum(a); total < 270 || total > 330 {
			t.Errorf("%v after the kill: admitted %.1f/s, not within 10%% of the limit", elapsed, total)
		}
	}
	for i, e := range c.envoys {
		if st := e.Stats(); i != 1 && (st.StreamsOpened < 2 || !e.Connected()) || i == 1 && st.StreamsOpened != 1 {
			t.Errorf("envoy %d opened %d streams (connected: %v)", i, st.StreamsOpened, e.Connected())
		}
	}
	c.checkReplaced(replaced)
	c.checkClean()
}

// TestFailoverLateTimer: as TestFailover, the moved Envoys' report timers
// early (4.99 s: Envoy's timer fires a few milliseconds early, and
// time_elapsed, truncated, reads 4 s) or late (5.05 s, as on a loaded
// machine), so that their first report on the new stream claims more or
// less than they held there: each still adopts its old share, its token
// bucket kept, and no period admits more than the limit +10%.
func TestFailoverLateTimer(t *testing.T) {
	for _, timer := range []time.Duration{4990 * time.Millisecond, 5050 * time.Millisecond} {
		t.Run(timer.String(), func(t *testing.T) {
			c := newCluster(t, clusterOptions{replicas: 2})
			var ts []*envoysim.Traffic
			for i, rate := range []float64{800, 100, 100} {
				cfg := envoysim.Config{}
				if i != 1 {
					cfg.ReportPeriod = timer
				}
				ts = append(ts, c.fleet.Send(c.envoy([]int{0, 1, 0}[i], cfg), bucketA, rate))
			}
			c.run(4 * c.period)
			replaced := c.replaced()
			c.kill(0)
			for elapsed := time.Duration(0); elapsed < 5*c.period; elapsed += c.period {
				a := c.admitted(c.period, ts...)
				if total := sum(a); total > 330 {
					t.Errorf("%v after the kill: admitted %.1f = %.1f/s, over the limit +10%%", elapsed, a, total)
				}
			}
			c.checkReplaced(replaced)
			c.checkClean()
		})
	}
}

// replaced counts the token buckets each Envoy replaced so far.
func (c *cluster) replaced() []int {
	out := make([]int, len(c.envoys))
	for i, e := range c.envoys {
		out[i] = e.Stats().ReplacedBuckets
	}
	return out
}

// checkReplaced fails the test if an Envoy replaced a token bucket since
// before: a moved Envoy keeps its old share and bucket.
func (c *cluster) checkReplaced(before []int) {
	c.t.Helper()
	for i, e := range c.envoys {
		if n := e.Stats().ReplacedBuckets - before[i]; n != 0 {
			c.t.Errorf("envoy %d replaced %d token buckets since", i, n)
		}
	}
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
