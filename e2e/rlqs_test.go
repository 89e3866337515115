package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// The Rate Limit Quota Service, end to end: two replicas of the binary on
// one real Redis, simulated Envoys (internal/testing/envoysim) on the wall clock.

var rlqsBucket = map[string]string{"name": "a"}

// quotaReplicas starts n replicas on one Redis, Envoys reporting every
// period.
func quotaReplicas(t *testing.T, n int, period time.Duration, extra ...string) []*fastlimit {
	t.Helper()
	return quotaReplicasOn(t, []string{"--redis-url", "redis://" + redistest.StartServer(t).Addr}, n, period, extra...)
}

// quotaReplicasWith is quotaReplicas on these rules files.
func quotaReplicasWith(t *testing.T, rules map[string]string, n int, period time.Duration, extra ...string) []*fastlimit {
	t.Helper()
	return quotaReplicasRules(t, rules, []string{"--redis-url", "redis://" + redistest.StartServer(t).Addr}, n, period, extra...)
}

// quotaReplicasOn is quotaReplicas on the Redis that redisFlags name.
func quotaReplicasOn(t *testing.T, redisFlags []string, n int, period time.Duration, extra ...string) []*fastlimit {
	t.Helper()
	return quotaReplicasRules(t, map[string]string{"rules.yaml": rlqsRules}, redisFlags, n, period, extra...)
}

func quotaReplicasRules(t *testing.T, rules map[string]string, redisFlags []string, n int, period time.Duration, extra ...string) []*fastlimit {
	t.Helper()
	dir := files.Dir(t, rules)
	var fs []*fastlimit
	for i := range n {
		admin := loopback.Addr(t)
		flags := append(slices.Clone(redisFlags), "--rlqs", "--rlqs-report-period", period.String(),
			"--rlqs-replica", fmt.Sprintf("r%d", i), "--admin-addr", admin)
		flags = append(flags, extra...)
		f := start(t, launch{rules: dir, flags: flags})
		f.Admin = admin
		fs = append(fs, f)
	}
	return fs
}

// quotaFleet is simulated Envoys on the wall clock, spread over replicas.
type quotaFleet struct {
	t      *testing.T
	period time.Duration
	conns  []grpc.ClientConnInterface
	fleet  envoysim.Fleet
	envoys []*envoysim.Envoy
}

func newQuotaFleet(t *testing.T, period time.Duration, fs []*fastlimit) *quotaFleet {
	t.Helper()
	q := &quotaFleet{t: t, period: period}
	for _, f := range fs {
		cc, err := grpc.NewClient(f.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		q.conns = append(q.conns, cc)
	}
	t.Cleanup(func() {
		for _, e := range q.envoys {
			e.Close()
		}
	})
	return q
}

// envoy adds an Envoy whose stream goes to replica first, else the next.
func (q *quotaFleet) envoy(first int) *envoysim.Envoy {
	q.t.Helper()
	return q.envoyOn(envoysim.Config{}, envoysim.FailoverDialer(first, q.conns...))
}

// envoyOn adds an Envoy of cfg (its domain and period the fleet's) on dial.
func (q *quotaFleet) envoyOn(cfg envoysim.Config, dial envoysim.Dialer) *envoysim.Envoy {
	q.t.Helper()
	cfg.Domain, cfg.ReportPeriod = "d", q.period
	e, err := envoysim.New(cfg, envoysim.WallClock{}, dial)
	if err != nil {
		q.t.Fatal(err)
	}
	q.envoys = append(q.envoys, e)
	q.fleet.Add(e)
	return e
}

func (q *quotaFleet) run(d time.Duration) { q.fleet.RunRealtime(context.Background(), d) }

// admitted runs for d and returns each traffic's admitted rate.
func (q *quotaFleet) admitted(d time.Duration, ts ...*envoysim.Traffic) []float64 {
	before := make([]uint64, len(ts))
	for i, tr := range ts {
		before[i] = tr.Envoy.Counts(tr.Bucket).Allowed
	}
	start := time.Now()
	q.run(d)
	secs := time.Since(start).Seconds()
	out := make([]float64, len(ts))
	for i, tr := range ts {
		out[i] = float64(tr.Envoy.Counts(tr.Bucket).Allowed-before[i]) / secs
	}
	return out
}

func (q *quotaFleet) checkClean() {
	q.t.Helper()
	if v := q.fleet.Violations(); v.Total() != 0 {
		q.t.Errorf("protocol violations: %v", v)
	}
	for i, e := range q.envoys {
		if st := e.Stats(); st.GapDecisions != 0 || st.Expired != 0 {
			q.t.Errorf("envoy %d: %d requests decided after an assignment lapsed (%d expiries)", i, st.GapDecisions, st.Expired)
		}
	}
}

// fairShare starts Envoys at 800, 100 and 100 req/s on the 300/s bucket,
// alternating between the first two replicas, and checks, over measure
// after 2 report periods (the first report's answers settle the shares),
// that the global admitted rate is 300/s ±10 % and that each Envoy gets
// at least half its fair share (100/s). It returns the Envoys' traffic.
func (q *quotaFleet) fairShare(measure time.Duration) []*envoysim.Traffic {
	q.t.Helper()
	var ts []*envoysim.Traffic
	for i, rate := range []float64{800, 100, 100} {
		ts = append(ts, q.fleet.Send(q.envoy(i%2), rlqsBucket, rate))
	}
	q.run(2 * q.period)
	got := q.admitted(measure, ts...)
	q.t.Logf("admitted %.1f/s", got)
	if sum := total(got); sum < 270 || sum > 330 {
		q.t.Errorf("admitted %.1f = %.1f/s, want 300 ±10%%", got, sum)
	}
	for i, g := range got {
		if g < 50 {
			q.t.Errorf("envoy %d admitted %.1f/s, under half its fair share (100)", i, g)
		}
	}
	return ts
}

func total(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// TestRLQSCluster: three Envoys at 800, 100 and 100 req/s on a 300/s
// bucket with two replicas sharing a Redis Cluster: each bucket's demand
// lives in its own slot, and the limit holds globally.
func TestRLQSCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	fs := quotaReplicasOn(t, []string{"--redis-type", "CLUSTER", "--redis-url", c.Seeds()}, 2, envoyPeriod)
	q := newQuotaFleet(t, envoyPeriod, fs)
	q.fairShare(envoyPeriod)
	// Each replica sees the other's Envoys through the Cluster.
	for i, f := range fs {
		if u := quotaUsage(t, f); u.Replicas != 2 || len(u.Clients) != 3 {
			t.Errorf("/v1/quota of replica %d = %+v, want 3 clients over 2 replicas", i, u)
		}
	}
	q.checkClean()
}

// TestRLQSRedisDown: Redis is killed under load (800/s on replica 0;
// 100/s and 100/s on replica 1, 100/s each once divided);
// --rlqs-on-store-error decides what the Envoys are assigned from then on:
// keep divides with the demand last read (100/s each, within
// --rlqs-store-grace), split gives each replica half the limit to divide
// among its own Envoys (150; 75 and 75), deny assigns DENY_ALL. Envoys
// never fall into allow-all or an expired assignment meanwhile.
func TestRLQSRedisDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy string
		want   []float64
	}{
		{"keep", []float64{100, 100, 100}},
		{"split", []float64{150, 75, 75}},
		{"deny", []float64{0, 0, 0}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			redis := redistest.StartServer(t)
			fs := quotaReplicasOn(t, []string{"--redis-url", "redis://" + redis.Addr}, 2, envoyPeriod, "--rlqs-on-store-error", tc.policy, "--rlqs-store-grace", "1m")
			q := newQuotaFleet(t, envoyPeriod, fs)
			var ts []*envoysim.Traffic
			for i, rate := range []float64{800, 100, 100} {
				ts = append(ts, q.fleet.Send(q.envoy([]int{0, 1, 1}[i]), rlqsBucket, rate))
			}
			q.run(2 * envoyPeriod)
			redis.Stop()
			// The next report carries the policy's answer; Envoy's new
			// token bucket starts with the old one's fill ratio.
			q.run(envoyPeriod)
			got := q.admitted(2*envoyPeriod, ts...)
			t.Logf("Redis down, %s: admitted %.1f/s", tc.policy, got)
			for i, w := range tc.want {
				if got[i] < w*0.85-3 || got[i] > w*1.15+3 {
					t.Errorf("envoy %d admitted %.1f/s with Redis down, want %v ±15%% (all: %.1f)", i, got[i], w, got)
				}
			}
			q.checkClean()
		})
	}
}

// TestRLQSIdle: a bucket without requests for --rlqs-idle-after is
// abandoned, and the inspection endpoint shows the division across
// replicas. (The real-Envoy scenarios join and kill Envoys.)
func TestRLQSIdle(t *testing.T) {
	t.Parallel()
	fs := quotaReplicas(t, 2, envoyPeriod, "--rlqs-idle-after", "4s")
	q := newQuotaFleet(t, envoyPeriod, fs)
	for i := range 2 {
		q.fleet.Send(q.envoy(i%2), rlqsBucket, 200)
	}
	idle := q.fleet.Send(q.envoys[0], map[string]string{"name": "idle"}, 5)
	q.run(envoyPeriod / 2)
	idle.SetRate(0)
	// Its reports at 5 s and 10 s name it idle for 5 s, then 10 s.
	q.run(2 * envoyPeriod)
	if q.envoys[0].State(map[string]string{"name": "idle"}).Cached {
		t.Error("idle bucket not abandoned")
	}
	u := quotaUsage(t, fs[1])
	if u.Rule != "d.name_a" || u.Replicas != 2 || len(u.Clients) != 2 {
		t.Errorf("/v1/quota = %+v, want 2 clients over 2 replicas", u)
	}
	q.checkClean()
}

type quotaUsageDoc struct {
	Rule     string `json:"rule"`
	Replicas int    `json:"replicas"`
	Clients  []struct {
		Replica string `json:"replica"`
	} `json:"clients"`
}

// quotaUsage reads /v1/quota for the bucket name=a from f's admin
// listener.
func quotaUsage(t *testing.T, f *fastlimit) quotaUsageDoc {
	t.Helper()
	resp, err := http.Get("http://" + f.Admin + "/v1/quota?domain=d&bucket=name=a")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var u quotaUsageDoc
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/quota: %d %v", resp.StatusCode, err)
	}
	return u
}
