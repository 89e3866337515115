package e2e_test

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// What Envoy 1.40's rate_limit_quota filter does, measured against a
// scripted RLQS server: the behaviours internal/testing/envoysim models
// (docs/rlqs.md, "What Envoy does"), each of which the simulator's own
// tests check of the simulator.

// scripted is an RLQS server that records the reports it gets and sends
// what the test tells it to.
type scripted struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	mu      sync.Mutex
	reports []scriptedReport
	send    func(*rlqspb.RateLimitQuotaResponse) error
	streams int
}

type scriptedReport struct {
	at time.Time
	u  *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
}

func (s *scripted) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	s.mu.Lock()
	s.send = st.Send
	s.streams++
	s.mu.Unlock()
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		s.mu.Lock()
		for _, u := range m.GetBucketQuotaUsages() {
			s.reports = append(s.reports, scriptedReport{at: time.Now(), u: u})
		}
		s.mu.Unlock()
	}
}

// named returns the reports of bucket name, in order.
func (s *scripted) named(name string) []scriptedReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []scriptedReport
	for _, r := range s.reports {
		if r.u.GetBucketId().GetBucket()["name"] == name {
			out = append(out, r)
		}
	}
	return out
}

func (s *scripted) respond(t *testing.T, a *rlqspb.RateLimitQuotaResponse_BucketAction) {
	t.Helper()
	s.mu.Lock()
	send := s.send
	s.mu.Unlock()
	if err := send(&rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{a}}); err != nil {
		t.Fatal(err)
	}
}

// serveScripted serves s on addr ("" for a free port) until the returned
// stop; it returns the address.
func serveScripted(t *testing.T, s *scripted, addr string) (string, func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, s)
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)
	return l.Addr().String(), gs.Stop
}

// factsEnvoy starts an Envoy with the RLQS bootstrap (envoytest.RLQS) on
// the server at addr, with no_assignment_behavior noAssignment.
func factsEnvoy(t *testing.T, addr, name string, mutate func(string) string) (*envoytest.Envoy, func(bucket string) int) {
	t.Helper()
	listen := envoytest.ListenerAddr(t)
	cfg, err := envoytest.RLQS{Listen: listen, Servers: []string{addr}, Domain: "d"}.Bootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		cfg = []byte(mutate(string(cfg)))
	}
	e := envoytest.Start(t, cfg, envoytest.Options{Name: name})
	c := &http.Client{Timeout: 10 * time.Second}
	return e, func(bucket string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+listen+"/", nil)
		req.Header.Set("x-bucket", bucket)
		resp, err := c.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// TestEnvoyRLQSFacts: one Envoy, a scripted server.
func TestEnvoyRLQSFacts(t *testing.T) {
	t.Parallel()
	s := &scripted{}
	addr, stop := serveScripted(t, s, "")
	e, get := factsEnvoy(t, addr, "facts", nil)
	// Envoy applies a response on its main thread and says so in its log.
	assign := func(a *rlqspb.RateLimitQuotaResponse_BucketAction) {
		t.Helper()
		n := strings.Count(e.Log(), "A new TokenBucket has been configured")
		s.respond(t, a)
		wait.For(t, 10*time.Second, func() bool { return strings.Count(e.Log(), "A new TokenBucket has been configured") > n })
	}
	start := time.Now()

	// A new bucket: the request passes (ALLOW_ALL until assigned) and its
	// subscription names it alone: 1 allowed, time_elapsed 0.
	if code := get("a"); code != http.StatusOK {
		t.Fatalf("the first request of a bucket: %d, want 200", code)
	}
	wait.For(t, 10*time.Second, func() bool { return len(s.named("a")) == 1 })
	if u := s.named("a")[0].u; u.GetNumRequestsAllowed() != 1 || u.GetNumRequestsDenied() != 0 || u.GetTimeElapsed().AsDuration() != 0 {
		t.Errorf("subscription = %v, want 1 allowed, time_elapsed 0", u)
	}

	// A replaced token bucket starts at the old one's fill ratio: 40 of
	// 100 left, replaced by one of 200, it holds 80 (not 200, nor 0).
	assign(tokenBucketAction("a", 100, 1, 60))
	drained := 0
	for range 60 {
		if get("a") == http.StatusOK {
			drained++
		}
	}
	assign(tokenBucketAction("a", 200, 1, 60))
	admitted := 0
	for range 250 {
		if get("a") == http.StatusOK {
			admitted++
		}
	}
	t.Logf("drained %d of 100, then the replacement of 200 admitted %d", drained, admitted)
	if drained != 60 || admitted < 75 || admitted > 85 {
		t.Errorf("a bucket at 40/100 replaced by one of 200 admitted %d (drained %d), want about 80: partly filled", admitted, drained)
	}

	// An assignment_time_to_live of 0 expires at once: no_assignment_behavior.
	assign(tokenBucketAction("a", 1, 1, 0))
	passed := 0
	for range 20 {
		if get("a") == http.StatusOK {
			passed++
		}
	}
	if passed != 20 {
		t.Errorf("after an assignment of TTL 0, %d of 20 requests passed, want all (ALLOW_ALL)", passed)
	}

	// The report comes 5 s after the first bucket, whatever
	// reporting_interval says (the bootstrap says 5 s too, as it must),
	// and every 5 s after; time_elapsed is truncated (4 s when the timer
	// fires a few milliseconds early).
	wait.For(t, 15*time.Second, func() bool { return len(s.named("a")) >= 3 })
	rs := s.named("a")
	if d := rs[1].at.Sub(start); d < 4500*time.Millisecond || d > 6*time.Second {
		t.Errorf("the first report came %v after the first request, want 5 s", d)
	}
	if d := rs[2].at.Sub(rs[1].at); d < 4900*time.Millisecond || d > 5100*time.Millisecond {
		t.Errorf("reports %v apart, want 5 s", d)
	}
	if e := rs[1].u.GetTimeElapsed().AsDuration(); e != 4*time.Second && e != 5*time.Second {
		t.Errorf("time_elapsed %v, want 4 or 5 s", e)
	}

	// While the server is down, a new bucket's subscription is lost, and
	// so is every report (built, its counters reset, then dropped); the
	// first report on the next stream names the bucket with a time_elapsed
	// and none of the request its subscription counted.
	stop()
	if code := get("b"); code != http.StatusOK {
		t.Errorf("a new bucket while the server is down: %d, want 200", code)
	}
	before := len(s.named("a"))
	next := rs[len(rs)-1].at.Add(2 * twinPeriod) // a tick with the server down, then one with it up
	<-time.After(time.Until(next.Add(-2 * time.Second)))
	serveScripted(t, s, addr)
	wait.For(t, 15*time.Second, func() bool { return len(s.named("b")) > 0 })
	if b := s.named("b"); len(b) != 1 || b[0].u.GetNumRequestsAllowed() != 0 || b[0].u.GetTimeElapsed().AsDuration() < time.Second {
		t.Errorf("bucket b's first report after the outage: %v, want 0 allowed and a time_elapsed", b[0].u)
	}
	if n := len(s.named("a")); n != before+1 {
		t.Errorf("%d reports of a since the outage, want 1 (the one in the outage lost)", n-before)
	}
}

// TestEnvoyRLQSTokenBucketDefault: a token bucket as no_assignment_behavior
// loads, and a request of a bucket that the main thread has created
// crashes Envoy 1.40 (no token bucket is built behind it): the second
// request on a quiet machine, a later one where the worker-to-main gap is
// longer than the time between two requests (a busy machine). The
// simulator refuses the config.
func TestEnvoyRLQSTokenBucketDefault(t *testing.T) {
	t.Parallel()
	addr, _ := serveScripted(t, &scripted{}, "")
	e, get := factsEnvoy(t, addr, "crash", func(cfg string) string {
		return strings.Replace(cfg, "{blanket_rule: ALLOW_ALL}", "{token_bucket: {max_tokens: 5, tokens_per_fill: 5, fill_interval: 1s}}", 1)
	})
	sent := 0
	if !wait.True(30*time.Second, func() bool {
		if e.Exited() {
			return true
		}
		get("a")
		sent++
		return false
	}) {
		t.Errorf("Envoy still runs after %d requests of one bucket under a token-bucket no_assignment_behavior", sent)
	}
	t.Logf("Envoy exited after %d request(s) of the bucket", sent)
	if sent < 2 {
		t.Errorf("Envoy exited after %d request(s) of the bucket, before its bucket could be created", sent)
	}
	if _, err := envoysim.New(envoysim.Config{NoAssignment: tokenBucketAction("a", 5, 5, 0).GetQuotaAssignmentAction().GetRateLimitStrategy()},
		envoysim.WallClock{}, nil); err == nil || !strings.Contains(err.Error(), "crash") {
		t.Errorf("the simulator took a token-bucket no_assignment_behavior: %v", err)
	}
}

// tokenBucketAction assigns bucket {name: name} a token bucket of max
// tokens refilled perSecond a second, for ttl seconds.
func tokenBucketAction(name string, max, perSecond uint32, ttl int64) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: map[string]string{"name": name}},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: &durationpb.Duration{Seconds: ttl},
				RateLimitStrategy:    envoysim.TokenBucket(max, perSecond, time.Second),
			},
		},
	}
}

// TestEnvoyRLQSOff: without --rlqs the binary answers a quota stream
// Unimplemented, and a real Envoy in front of it decides every request by
// its no_assignment_behavior (ALLOW_ALL), reopening the stream at each
// report.
func TestEnvoyRLQSOff(t *testing.T) {
	t.Parallel()
	f := start(t, launch{rules: files.Dir(t, map[string]string{"rules.yaml": rlqsRules})})
	s, err := rlqspb.NewRateLimitQuotaServiceClient(f.conn).StreamRateLimitQuotas(ctxTimeout(t, 10*time.Second))
	if err == nil {
		// A Send on a stream the server has ended says io.EOF; its status
		// comes from Recv.
		_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d"})
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("a quota stream without --rlqs: %v, want Unimplemented", err)
	}
	_, get := factsEnvoy(t, f.GRPC, "off", nil)
	for i := range 50 {
		if code := get("e"); code != http.StatusOK {
			t.Fatalf("request %d through Envoy: %d, want 200 (ALLOW_ALL)", i, code)
		}
	}
}
