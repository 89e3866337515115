package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// Issue 27's demand shifts, silence, a large Envoy and a black-holed
// replica, end to end: two replicas of the binary on one real Redis, the
// simulated Envoys on the wall clock at Envoy's 5 s reports. The tests
// that only wait run in parallel.

const envoyPeriod = 5 * time.Second

// sampler records what each traffic admitted, every 50 ms of wall time.
type sampler struct {
	ts   []*envoysim.Traffic
	mu   sync.Mutex
	at   []time.Time
	n    [][]uint64 // per sample, per traffic
	stop chan struct{}
	done chan struct{}
}

func startSampler(ts []*envoysim.Traffic) *sampler {
	s := &sampler{ts: ts, stop: make(chan struct{}), done: make(chan struct{})}
	s.take()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.take()
			}
		}
	}()
	return s
}

func (s *sampler) take() {
	row := make([]uint64, len(s.ts))
	for i, tr := range s.ts {
		row[i] = tr.Envoy.Counts(tr.Bucket).Allowed
	}
	s.mu.Lock()
	s.at, s.n = append(s.at, time.Now()), append(s.n, row)
	s.mu.Unlock()
}

func (s *sampler) close() {
	close(s.stop)
	<-s.done
}

// total is what the traffics admitted between the samples nearest from
// and to, per second.
func (s *sampler) total(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, j := s.nearest(from), s.nearest(to)
	sum := 0.0
	for k := range s.ts {
		sum += float64(s.n[j][k] - s.n[i][k])
	}
	return sum / s.at[j].Sub(s.at[i]).Seconds()
}

func (s *sampler) nearest(t time.Time) int {
	best := 0
	for i, at := range s.at {
		if d, b := at.Sub(t).Abs(), s.at[best].Sub(t).Abs(); d < b {
			best = i
		}
	}
	return best
}

// worst is the most the traffics admitted in a window of width between
// from and to (scaled to width from the samples' own span, which a busy
// machine stretches), and when it started.
func (s *sampler) worst(from, to time.Time, width time.Duration) (float64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	worst, at := 0.0, time.Time{}
	for i := range s.at {
		if s.at[i].Before(from) {
			continue
		}
		j := i
		for j < len(s.at) && s.at[j].Sub(s.at[i]) < width {
			j++
		}
		if j == len(s.at) || s.at[j].After(to) {
			break
		}
		sum := 0.0
		for k := range s.ts {
			sum += float64(s.n[j][k] - s.n[i][k])
		}
		if sum *= width.Seconds() / s.at[j].Sub(s.at[i]).Seconds(); sum > worst {
			worst, at = sum, s.at[i]
		}
	}
	return worst, at
}

// afterTick waits until every Envoy has sent the report due at or after
// due, and returns when the last did.
func afterTick(t *testing.T, due time.Time, es ...*envoysim.Envoy) time.Time {
	t.Helper()
	if !wait.True(time.Until(due)+2*envoyPeriod, func() bool {
		for _, e := range es {
			if !e.NextReport().After(due) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the Envoys did not report")
	}
	return time.Now()
}

// TestRLQSDemandShifts: issue 27's shifts, on one replica (bucket a, four
// Envoys on replica 0) and across two (bucket b, two on each), at once.
// Four Envoys ask 600/s each of 300/s; three drop to 1/s (busy to idle),
// then ask 600/s again (idle to busy); each shift comes right after the
// Envoys' reports. From one report period after each shift every
// period's admitted total is within 10% of the limit, and no 5 s window
// from the second period on admits more than 110% of it.
func TestRLQSDemandShifts(t *testing.T) {
	t.Parallel()
	fs := quotaReplicas(t, 2, envoyPeriod)
	q := newQuotaFleet(t, envoyPeriod, fs)
	buckets := []map[string]string{{"name": "a"}, {"name": "b"}}
	var groups [2][]*envoysim.Traffic
	for g, b := range buckets {
		for i := range 4 {
			first := 0
			if g == 1 {
				first = i % 2
			}
			groups[g] = append(groups[g], q.fleet.Send(q.envoy(first), b, 600))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.fleet.RunRealtime(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	wait.True(5*time.Second, func() bool { return !q.envoys[0].NextReport().IsZero() })
	samplers := [2]*sampler{startSampler(groups[0]), startSampler(groups[1])}
	start := time.Now()
	tick0 := q.envoys[0].NextReport() // the first reports; the next every 5 s
	tick := func(k int) time.Time { return tick0.Add(time.Duration(k) * envoyPeriod) }
	type shift struct {
		name  string
		rates []float64
		at    time.Time
	}
	shifts := []*shift{{name: "busy to idle", rates: []float64{600, 1, 1, 1}}, {name: "idle to busy", rates: []float64{600, 600, 600, 600}}}
	for i, s := range shifts {
		s.at = afterTick(t, tick(2+3*i), q.envoys...)
		for _, g := range groups {
			for j, tr := range g {
				tr.SetRate(s.rates[j])
			}
		}
	}
	end := afterTick(t, tick(8), q.envoys...).Add(envoyPeriod / 10)
	for _, s := range samplers {
		s.close()
	}
	for g, name := range []string{"one replica", "two replicas"} {
		s := samplers[g]
		for i, sh := range shifts {
			to := end
			if i+1 < len(shifts) {
				to = shifts[i+1].at
			}
			for from := sh.at.Add(envoyPeriod); !from.Add(envoyPeriod).After(to.Add(envoyPeriod / 10)); from = from.Add(envoyPeriod) {
				got := s.total(from, from.Add(envoyPeriod))
				t.Logf("%s, %s: %.1f/s admitted %v to %v after the shift", name, sh.name, got,
					from.Sub(sh.at).Round(100*time.Millisecond), from.Add(envoyPeriod).Sub(sh.at).Round(100*time.Millisecond))
				if got < 270 || got > 330 {
					t.Errorf("%s, %s: %.1f/s admitted from %v after the shift, not within 10%% of 300",
						name, sh.name, got, from.Sub(sh.at).Round(100*time.Millisecond))
				}
			}
		}
		w, at := s.worst(start.Add(2*envoyPeriod), end, 5*time.Second)
		t.Logf("%s: the worst 5 s window admitted %.0f (%.1f%% of 1500), %v after the start", name, w, w/15, at.Sub(start).Round(100*time.Millisecond))
		if w > 1.1*1500 {
			t.Errorf("%s: a 5 s window admitted %.0f, over 110%% of 1500", name, w)
		}
	}
	q.checkClean()
}

// TestRLQSSilentEnvoy: of two Envoys on different replicas asking 600/s
// of 300/s, one hangs with its stream open: within 3 report periods of
// its last report its replica ends the stream (counted) and the other
// Envoy holds the whole limit. Meanwhile an Envoy running the example's
// filter config (examples/envoy-rlqs) sends requests without the tenant
// header, which land in {name: api} and are held to its 300/s.
func TestRLQSSilentEnvoy(t *testing.T) {
	t.Parallel()
	example := files.Read(t, "../examples/envoy-rlqs/rules/quota.yaml")
	fs := quotaReplicasWith(t, map[string]string{"rules.yaml": rlqsRules, "quota.yaml": string(example)}, 2, envoyPeriod)
	q := newQuotaFleet(t, envoyPeriod, fs)
	busy, silent := q.envoy(0), q.envoy(1)
	q.fleet.Send(busy, rlqsBucket, 600)
	q.fleet.Send(silent, rlqsBucket, 600)
	ex := q.exampleEnvoy()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.fleet.RunRealtime(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	var exAllowed atomic.Int64 // 1000 requests a second without x-tenant
	stopEx := loop(1, time.Millisecond, func(int, int) {
		if ex.Serve(map[string]string{":path": "/api/orders"}) {
			exAllowed.Add(1)
		}
	})
	defer stopEx()
	wait.True(5*time.Second, func() bool { return !silent.NextReport().IsZero() })
	last := afterTick(t, silent.NextReport().Add(2*envoyPeriod), silent)
	q.fleet.Pause(silent)
	exFrom, exBefore := time.Now(), exAllowed.Load()
	if !wait.True(6*envoyPeriod, func() bool { return busy.Held(rlqsBucket) >= 0.98*300 }) {
		t.Fatalf("the busy Envoy holds %.1f/s %v later, not the whole limit", busy.Held(rlqsBucket), time.Since(last))
	}
	took := time.Since(last)
	t.Logf("the busy Envoy holds %.1f/s %v after the silent one's last report", busy.Held(rlqsBucket), took.Round(10*time.Millisecond))
	if took > 3*envoyPeriod+2*time.Second {
		t.Errorf("the silent Envoy's share came back %v after its last report, over 3 periods", took)
	}
	_, page := scrape.Get(t, "http://"+fs[1].Admin+"/metrics")
	if n := scrape.Value(t, page, `fastlimit_rlqs_silent_streams_total{domain="d"}`); n != 1 {
		t.Errorf("replica 1 counted %v silent streams, want 1", n)
	}
	exRate := float64(exAllowed.Load()-exBefore) / time.Since(exFrom).Seconds()
	t.Logf("requests without x-tenant, through the example's filter config: %.1f/s admitted", exRate)
	if exRate < 270 || exRate > 330 {
		t.Errorf("requests without x-tenant admitted at %.1f/s, want {name: api}'s 300/s ±10%%", exRate)
	}
	if st := ex.Stats(); st.Unbucketed != 0 {
		t.Errorf("%d of the example's requests got no bucket", st.Unbucketed)
	}
}

// exampleEnvoy adds an Envoy running examples/envoy-rlqs's filter config
// (its domain, matchers and bucket settings), on replica 0 first.
func (q *quotaFleet) exampleEnvoy() *envoysim.Envoy {
	q.t.Helper()
	cfg, _, err := envoysim.FilterConfig(files.Read(q.t, "../examples/envoy-rlqs/envoy.yaml"))
	if err != nil {
		q.t.Fatal(err)
	}
	m, err := envoysim.NewMatcher(cfg)
	if err != nil {
		q.t.Fatal(err)
	}
	e, err := envoysim.New(envoysim.Config{Domain: cfg.GetDomain(), ReportPeriod: q.period, Matcher: m}, envoysim.WallClock{},
		envoysim.FailoverDialer(0, q.conns...))
	if err != nil {
		q.t.Fatal(err)
	}
	q.envoys = append(q.envoys, e)
	q.fleet.Add(e)
	return e
}

// TestRLQSLargeEnvoy: an Envoy holding 100,000 buckets (a UUID tenant
// each, about 80 bytes a usage: 8 MB a report, over gRPC's 4 MiB default)
// sends them all in every report, as Envoy does; each report is answered
// in full, every bucket assigned its token bucket, well within the TTL,
// and the stream lives.
func TestRLQSLargeEnvoy(t *testing.T) {
	fs := quotaReplicas(t, 2, envoyPeriod)
	large := grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20))
	cc, err := grpc.NewClient(fs[0].GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()), large)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	s, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_000
	report := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
	for i := range n {
		report.BucketQuotaUsages = append(report.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": "big", "tenant": fmt.Sprintf("%08x-1111-4222-8333-%012x", i, i)}},
			NumRequestsAllowed: 12, NumRequestsDenied: 3, TimeElapsed: durationpb.New(envoyPeriod)})
	}
	// A report every period, as Envoy sends them.
	tick := time.NewTicker(envoyPeriod)
	defer tick.Stop()
	for round := range 3 {
		if round > 0 {
			<-tick.C
		}
		start := time.Now()
		if err := s.Send(report); err != nil {
			t.Fatal(err)
		}
		got, responses := 0, 0
		for got < n {
			r, err := s.Recv()
			if err != nil {
				t.Fatalf("report %d: the stream failed after %d of %d actions: %v", round, got, n, err)
			}
			responses++
			for _, a := range r.GetBucketAction() {
				if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
					t.Fatalf("report %d: bucket %v assigned %v", round, a.GetBucketId().GetBucket(), a)
				}
			}
			got += len(r.GetBucketAction())
		}
		took := time.Since(start)
		t.Logf("report %d of %d buckets: %d actions in %d responses, %v", round, n, got, responses, took.Round(time.Millisecond))
		// Envoy keeps an assignment for its TTL: an answer within it holds.
		if ttl := 6 * envoyPeriod; took > ttl {
			t.Errorf("report %d answered in %v: assignments of a TTL of %v would not hold", round, took, ttl)
		}
	}
	_, page := scrape.Get(t, "http://"+fs[0].Admin+"/metrics")
	if b := scrape.Value(t, page, `fastlimit_rlqs_buckets{domain="d"}`); b != n {
		t.Errorf("fastlimit_rlqs_buckets = %v, want %d", b, n)
	}
	if r := scrape.Value(t, page, `fastlimit_rlqs_refused_reports_total{domain="d"}`); r != 0 {
		t.Errorf("%v reports refused", r)
	}
}

// TestRLQSBlackHoledReplica: one of two replicas stops (SIGSTOP: its
// connections stay open, nothing is answered, nothing reset). Its Envoys,
// with the example's cluster settings (HTTP/2 keepalive 12 s + 15 % and
// 3 s, gRPC health checks, round robin), abort the dead connection and
// open their stream on the other replica before their assignments
// expire: no request is decided by a fallback or default meanwhile, and
// the limit holds again once they moved.
func TestRLQSBlackHoledReplica(t *testing.T) {
	t.Parallel()
	fs := quotaReplicas(t, 2, envoyPeriod)
	q := newQuotaFleet(t, envoyPeriod, fs)
	var ts []*envoysim.Traffic
	for i, rate := range []float64{800, 100, 100} {
		c, err := envoysim.NewCluster(envoysim.ClusterConfig{
			Hosts: []string{fs[0].GRPC, fs[1].GRPC}, First: []int{0, 1, 0}[i], ConnectTimeout: time.Second,
			HealthCheck: envoysim.HealthCheck{Interval: 2 * time.Second, Timeout: time.Second, Unhealthy: 2, Healthy: 1},
			Keepalive:   exampleKeepalive,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		e, err := envoysim.New(envoysim.Config{Domain: "d", Keepalive: exampleKeepalive}, envoysim.WallClock{}, c.Dial)
		if err != nil {
			t.Fatal(err)
		}
		q.envoys = append(q.envoys, e)
		q.fleet.Add(e)
		ts = append(ts, q.fleet.Send(e, rlqsBucket, rate))
	}
	q.run(3 * envoyPeriod)
	if err := fs[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs[0].cmd.Process.Signal(syscall.SIGCONT) })
	lost := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.fleet.RunRealtime(ctx, time.Hour) }()
	moved := map[int]time.Duration{}
	// When each moved, to 50 ms, over 7 periods.
	wait.True(7*envoyPeriod, func() bool {
		for _, i := range []int{0, 2} {
			if _, ok := moved[i]; !ok && q.envoys[i].Stats().StreamsOpened >= 2 && q.envoys[i].Connected() {
				moved[i] = time.Since(lost)
			}
		}
		return false
	})
	cancel()
	<-done
	got := q.admitted(2*envoyPeriod, ts...)
	t.Logf("streams moved %v after the replica stopped; then admitted %.1f/s", moved, got)
	for _, i := range []int{0, 2} {
		st := q.envoys[i].Stats()
		if _, ok := moved[i]; !ok || st.KeepaliveAborts == 0 {
			t.Errorf("envoy %d did not leave the stopped replica: %+v", i, st)
		}
	}
	if total := total(got); total < 270 || total > 330 {
		t.Errorf("after the move admitted %.1f = %.1f/s, want 300 ±10%%", got, total)
	}
	q.checkClean()
}

// exampleKeepalive is examples/envoy-rlqs's connection_keepalive.
var exampleKeepalive = envoysim.Keepalive{Interval: 12 * time.Second, Timeout: 3 * time.Second}
