package envoysim_test

import (
	"context"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
)

// scripted is an RLQS server whose answers each test writes by hand: it
// hands the test every report and sends what the test tells it to.
type scripted struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	reports chan *rlqspb.RateLimitQuotaUsageReports
	mu      sync.Mutex
	stream  grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	kill    chan struct{}
	refuse  bool
}

func (s *scripted) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	s.mu.Lock()
	if s.refuse {
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "refused")
	}
	s.stream = st
	kill := s.kill
	s.mu.Unlock()
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			s.reports <- r
		}
	}()
	select {
	case <-st.Context().Done():
		return nil
	case <-kill:
		return status.Error(codes.Unavailable, "killed")
	}
}

func (s *scripted) send(t *testing.T, resp *rlqspb.RateLimitQuotaResponse) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stream.Send(resp); err != nil {
		t.Fatal(err)
	}
}

// killStream ends the current stream with an error.
func (s *scripted) killStream() {
	s.mu.Lock()
	close(s.kill)
	s.kill = make(chan struct{})
	s.mu.Unlock()
}

func (s *scripted) next(t *testing.T) *rlqspb.RateLimitQuotaUsageReports {
	t.Helper()
	select {
	case r := <-s.reports:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no report")
		return nil
	}
}

func (s *scripted) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-s.reports:
		t.Fatalf("unexpected report %v", r)
	case <-time.After(50 * time.Millisecond):
	}
}

type harness struct {
	env   *envoysim.Envoy
	clock *envoysim.ManualClock
	srv   *scripted
	dial  envoysim.Dialer // to srv
}

func newHarness(t *testing.T, cfg envoysim.Config) *harness {
	t.Helper()
	srv := &scripted{reports: make(chan *rlqspb.RateLimitQuotaUsageReports, 100), kill: make(chan struct{})}
	cc, _ := envoysim.InProcess(t, func(gs *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(gs, srv) })
	clock := envoysim.NewManualClock(time.Unix(1_000_000, 0))
	if cfg.Domain == "" {
		cfg.Domain = "d"
	}
	dial := envoysim.GRPCDialer(cc)
	env, err := envoysim.New(cfg, clock, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return &harness{env: env, clock: clock, srv: srv, dial: dial}
}

// advance moves time in 10ms steps, running the Envoy's timers.
func (h *harness) advance(d time.Duration) {
	for step := 10 * time.Millisecond; d > 0; d -= step {
		h.clock.Advance(min(step, d))
		h.env.Step()
	}
}

// respond sends a response and waits until the Envoy has applied it.
func (h *harness) respond(t *testing.T, actions ...*rlqspb.RateLimitQuotaResponse_BucketAction) {
	t.Helper()
	h.srv.send(t, &rlqspb.RateLimitQuotaResponse{BucketAction: actions})
	if !h.env.Await(5 * time.Second) {
		t.Fatal("response not received")
	}
}

var idA = map[string]string{"name": "a"}

func tokenBucket(maxTokens, perFill uint32, fill time.Duration, ttl time.Duration, id map[string]string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return assignment(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)},
	}})
}

func blanket(rule typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}

func assignment(id map[string]string, ttl time.Duration, s *typev3.RateLimitStrategy) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: id},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: s,
			},
		},
	}
}

func abandon(id map[string]string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId:     &rlqspb.BucketId{Bucket: id},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}

// requests sends n requests and returns how many passed.
func (h *harness) requests(id map[string]string, n int) int {
	ok := 0
	for range n {
		if h.env.Request(id) {
			ok++
		}
	}
	return ok
}

func usageOf(t *testing.T, r *rlqspb.RateLimitQuotaUsageReports, id map[string]string) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	t.Helper()
	for _, u := range r.GetBucketQuotaUsages() {
		if envoysim.Key(u.GetBucketId().GetBucket()) == envoysim.Key(id) {
			return u
		}
	}
	t.Fatalf("bucket %v not in report %v", id, r)
	return nil
}

// TestSubscriptionAndReports: the first request subscribes with a report
// of its bucket alone (1 allowed, 0 s); then every period reports every
// bucket, idle ones too, with deltas and whole seconds.
func TestSubscriptionAndReports(t *testing.T) {
	h := newHarness(t, envoysim.Config{})
	idB := map[string]string{"name": "b"}
	if !h.env.Request(idA) {
		t.Fatal("first request denied under the default no_assignment_behavior")
	}
	r := h.srv.next(t)
	if r.GetDomain() != "d" || len(r.GetBucketQuotaUsages()) != 1 {
		t.Fatalf("subscription = %v", r)
	}
	u := usageOf(t, r, idA)
	if u.GetNumRequestsAllowed() != 1 || u.GetNumRequestsDenied() != 0 || u.GetTimeElapsed().AsDuration() != 0 {
		t.Fatalf("subscription usage = %v", u)
	}
	h.advance(2300 * time.Millisecond)
	h.env.Request(idB)
	if r := h.srv.next(t); len(r.GetBucketQuotaUsages()) != 1 || usageOf(t, r, idB).GetNumRequestsAllowed() != 1 {
		t.Fatalf("second subscription = %v", r)
	}
	h.requests(idA, 7)
	h.advance(2700 * time.Millisecond) // the tick, 5s after the first bucket
	r = h.srv.next(t)
	if len(r.GetBucketQuotaUsages()) != 2 {
		t.Fatalf("periodic report = %v, want both buckets", r)
	}
	if u := usageOf(t, r, idA); u.GetNumRequestsAllowed() != 7 || u.GetTimeElapsed().AsDuration() != 5*time.Second {
		t.Errorf("a = %v, want 7 allowed over 5s", u)
	}
	// b subscribed 2.3s after a: 2.7s elapsed, truncated to 2.
	if u := usageOf(t, r, idB); u.GetNumRequestsAllowed() != 0 || u.GetTimeElapsed().AsDuration() != 2*time.Second {
		t.Errorf("b = %v, want 0 allowed over 2s", u)
	}
	h.advance(5 * time.Second)
	if r := h.srv.next(t); len(r.GetBucketQuotaUsages()) != 2 || usageOf(t, r, idA).GetNumRequestsAllowed() != 0 {
		t.Errorf("idle report = %v", r)
	}
}

// TestNoAssignmentDeny: a blanket DENY_ALL denies the first request and
// every request until an assignment comes; a token bucket there is refused.
func TestNoAssignmentDeny(t *testing.T) {
	h := newHarness(t, envoysim.Config{NoAssignment: blanket(typev3.RateLimitStrategy_DENY_ALL)})
	if h.env.Request(idA) || h.env.Request(idA) {
		t.Fatal("request passed under DENY_ALL")
	}
	if u := usageOf(t, h.srv.next(t), idA); u.GetNumRequestsDenied() != 1 {
		t.Fatalf("subscription = %v", u)
	}
	h.respond(t, assignment(idA, 10*time.Second, blanket(typev3.RateLimitStrategy_ALLOW_ALL)))
	if !h.env.Request(idA) {
		t.Fatal("denied under ALLOW_ALL")
	}
	_, err := envoysim.New(envoysim.Config{NoAssignment: tokenBucket(1, 1, time.Second, 0, nil).GetQuotaAssignmentAction().GetRateLimitStrategy()},
		h.clock, nil)
	if err == nil {
		t.Error("token-bucket no_assignment_behavior accepted")
	}
}

// TestTokenBucket: a bucket starts full and refills continuously at
// tokens_per_fill over the whole seconds of fill_interval.
func TestTokenBucket(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fill      time.Duration
		burst     int // passes at once
		after2s   int // passes 2s later
		violation func(envoysim.Violations) int
	}{
		{"1s", time.Second, 10, 10, nil},
		{"2.9s truncates to 2s", 2900 * time.Millisecond, 10, 4, nil},
		{"under 1s divides by zero", 500 * time.Millisecond, 1000, 1000,
			func(v envoysim.Violations) int { return v.FillIntervalUnderSecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, envoysim.Config{})
			h.env.Request(idA)
			h.srv.next(t)
			perFill := uint32(5)
			if tc.fill > time.Second {
				perFill = 4 // 2 a second: exact in binary, as 5/2 is not
			}
			h.respond(t, tokenBucket(10, perFill, tc.fill, 30*time.Second, idA))
			if got := h.requests(idA, 1000); got != tc.burst {
				t.Errorf("burst = %d, want %d", got, tc.burst)
			}
			h.advance(2 * time.Second)
			if got := h.requests(idA, 1000); got != tc.after2s {
				t.Errorf("after 2s = %d, want %d", got, tc.after2s)
			}
			v := h.env.Violations()
			want := 0
			if tc.violation != nil {
				want = 1
				if tc.violation(v) != 1 {
					t.Errorf("violations = %v", v)
				}
			}
			if v.Total() != want {
				t.Errorf("violations = %v, want %d", v, want)
			}
		})
	}
}

// TestTokensPerFillUnset: an unset tokens_per_fill is 0 (one token a
// year), not the API's default of 1.
func TestTokensPerFillUnset(t *testing.T) {
	h := newHarness(t, envoysim.Config{})
	h.env.Request(idA)
	h.srv.next(t)
	a := tokenBucket(3, 1, time.Second, 30*time.Second, idA)
	a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().TokensPerFill = nil
	h.respond(t, a)
	h.requests(idA, 3)
	h.advance(5 * time.Second)
	if got := h.requests(idA, 10); got != 0 {
		t.Errorf("passed %d after 5s, want 0", got)
	}
	if v := h.env.Violations(); v.NoTokensPerFill != 1 || v.Total() != 1 {
		t.Errorf("violations = %v", v)
	}
}

// TestTTL: only whole seconds count; on expiry the fallback applies for
// its timeout, then no_assignment_behavior.
func TestTTL(t *testing.T) {
	h := newHarness(t, envoysim.Config{
		ReportPeriod: time.Hour, // no periodic report in the way
		Expired:      &envoysim.Fallback{Strategy: blanket(typev3.RateLimitStrategy_DENY_ALL), Timeout: 2500 * time.Millisecond},
	})
	h.env.Request(idA)
	h.srv.next(t)
	h.respond(t, assignment(idA, 1900*time.Millisecond, blanket(typev3.RateLimitStrategy_ALLOW_ALL)))
	h.advance(990 * time.Millisecond)
	if !h.env.Request(idA) {
		t.Fatal("denied before the TTL")
	}
	h.advance(20 * time.Millisecond) // 1.01s: the TTL read as 1s is over
	if h.env.Request(idA) {
		t.Fatal("the fallback DENY_ALL did not apply after 1s")
	}
	h.advance(2 * time.Second) // fallback timeout read as 2s
	if !h.env.Request(idA) {
		t.Fatal("no_assignment_behavior (ALLOW_ALL) did not apply after the fallback")
	}
	st := h.env.Stats()
	if st.Expired != 1 || st.FallbackExpired != 1 || st.GapDecisions != 2 {
		t.Errorf("stats = %+v", st)
	}
	h.respond(t, assignment(idA, 0, blanket(typev3.RateLimitStrategy_ALLOW_ALL)))
	h.advance(10 * time.Millisecond)
	if !h.env.State(idA).Fallback {
		t.Error("a TTL of 0 did not expire at once")
	}
	// The 1.9s TTL is also not above the report period (1s <= 1h).
	if v := h.env.Violations(); v.TTLUnderSecond != 1 || v.TTLNotAboveReport != 1 || v.Total() != 2 {
		t.Errorf("violations = %v", v)
	}
}

// TestTTLNotAboveReport: a TTL that cannot outlive a report period counts.
func TestTTLNotAboveReport(t *testing.T) {
	h := newHarness(t, envoysim.Config{})
	h.env.Request(idA)
	h.srv.next(t)
	h.respond(t, assignment(idA, 5*time.Second, blanket(typev3.RateLimitStrategy_ALLOW_ALL)))
	if v := h.env.Violations(); v.TTLNotAboveReport != 1 || v.Total() != 1 {
		t.Errorf("violations = %v", v)
	}
}

// TestKeptAndReplacedBuckets: an assignment equal in max_tokens,
// tokens_per_fill and fill_interval's nanos keeps the bucket (a change of
// seconds alone is a violation); another replaces it, starting full by
// default (the count, not 0, as a bool), at the same ratio of remaining
// tokens with ReplacePartial.
func TestKeptAndReplacedBuckets(t *testing.T) {
	for _, mode := range []envoysim.Replace{envoysim.ReplacePartial, envoysim.ReplaceFullOrEmpty} {
		full := mode == envoysim.ReplaceFullOrEmpty
		h := newHarness(t, envoysim.Config{Replace: mode})
		h.env.Request(idA)
		h.srv.next(t)
		h.respond(t, tokenBucket(100, 1, time.Hour, 30*time.Second, idA))
		h.requests(idA, 60) // 40 left
		h.respond(t, tokenBucket(100, 1, time.Hour, 30*time.Second, idA))
		if got := h.env.State(idA).Tokens; got < 39.9 || got > 40.1 {
			t.Fatalf("kept bucket holds %v, want 40", got)
		}
		h.respond(t, tokenBucket(100, 1, 2*time.Hour, 30*time.Second, idA))
		if v := h.env.Violations(); v.UnnoticedChange != 1 {
			t.Errorf("violations = %v, want one unnoticed change", v)
		}
		h.respond(t, tokenBucket(50, 1, time.Hour, 30*time.Second, idA))
		want := 20.0
		if full {
			want = 50
		}
		if got := h.env.State(idA).Tokens; got < want-0.1 || got > want+0.1 {
			t.Errorf("replace %v: replaced bucket holds %v, want %v", mode, got, want)
		}
		if st := h.env.Stats(); st.KeptBuckets != 2 || st.ReplacedBuckets != 1 {
			t.Errorf("stats = %+v", st)
		}
	}
}

// TestDroppedActions: actions for unknown or empty ids, without an action
// or a strategy, and requests_per_time_unit are dropped and counted, as is
// an empty response.
func TestDroppedActions(t *testing.T) {
	h := newHarness(t, envoysim.Config{NoAssignment: blanket(typev3.RateLimitStrategy_DENY_ALL)})
	h.env.Request(idA)
	h.srv.next(t)
	rptu := assignment(idA, 30*time.Second, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 10, TimeUnit: typev3.RateLimitUnit_SECOND},
	}})
	h.respond(t,
		assignment(map[string]string{"name": "other"}, 30*time.Second, blanket(typev3.RateLimitStrategy_ALLOW_ALL)),
		assignment(nil, 30*time.Second, blanket(typev3.RateLimitStrategy_ALLOW_ALL)),
		assignment(idA, 30*time.Second, nil),
		rptu,
	)
	h.respond(t)
	if h.env.Request(idA) {
		t.Error("a dropped action changed the bucket")
	}
	h.respond(t, &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: &rlqspb.BucketId{Bucket: idA}})
	if !h.env.Request(idA) {
		t.Error("an action without assignment does not allow (Envoy caches it without strategy)")
	}
	want := envoysim.Violations{UnknownBucket: 1, MissingBucketID: 1, NoStrategy: 1, RequestsPerTimeUnit: 1, EmptyResponse: 1, NoAction: 1}
	if v := h.env.Violations(); v != want {
		t.Errorf("violations = %v, want %v", v, want)
	}
}

// TestAbandon: an abandoned bucket is erased with its usage; the next
// request subscribes again, and an action in between is for an unknown
// bucket.
func TestAbandon(t *testing.T) {
	h := newHarness(t, envoysim.Config{})
	h.env.Request(idA)
	h.srv.next(t)
	h.requests(idA, 3)
	h.respond(t, abandon(idA))
	if h.env.State(idA).Cached {
		t.Fatal("abandoned bucket still cached")
	}
	h.respond(t, assignment(idA, 30*time.Second, blanket(typev3.RateLimitStrategy_DENY_ALL)))
	if v := h.env.Violations(); v.UnknownBucket != 1 {
		t.Errorf("violations = %v", v)
	}
	h.env.Request(idA)
	if u := usageOf(t, h.srv.next(t), idA); u.GetNumRequestsAllowed() != 1 {
		t.Errorf("resubscription = %v (the abandoned usage must be gone)", u)
	}
	h.advance(5 * time.Second)
	if r := h.srv.next(t); len(r.GetBucketQuotaUsages()) != 1 {
		t.Errorf("report = %v", r)
	}
}

// TestReconnect: a stream the server ends is reopened at the next tick,
// whose report lists every cached bucket; the cached assignment holds
// meanwhile. Without a server, a tick drops its usage.
func TestReconnect(t *testing.T) {
	h := newHarness(t, envoysim.Config{})
	idB := map[string]string{"name": "b"}
	h.env.Request(idA)
	h.srv.next(t)
	h.env.Request(idB)
	h.srv.next(t)
	h.respond(t, assignment(idA, 30*time.Second, blanket(typev3.RateLimitStrategy_DENY_ALL)))
	h.srv.killStream()
	for h.env.Connected() {
		h.env.Await(5 * time.Second)
	}
	if h.env.Request(idA) {
		t.Error("the cached assignment did not outlive the stream")
	}
	h.srv.mu.Lock()
	h.srv.refuse = true
	h.srv.mu.Unlock()
	h.advance(5 * time.Second)
	h.srv.none(t)
	for h.env.Connected() {
		h.env.Await(5 * time.Second)
	}
	h.srv.mu.Lock()
	h.srv.refuse = false
	h.srv.mu.Unlock()
	h.advance(5 * time.Second)
	r := h.srv.next(t)
	if len(r.GetBucketQuotaUsages()) != 2 {
		t.Fatalf("first report after reconnecting = %v", r)
	}
	// The dropped tick reset the counters: this report covers 5s.
	if u := usageOf(t, r, idA); u.GetNumRequestsDenied() != 0 || u.GetTimeElapsed().AsDuration() != 5*time.Second {
		t.Errorf("a = %v", u)
	}
	if st := h.env.Stats(); st.StreamsOpened != 3 || st.StreamsClosed != 2 {
		t.Errorf("stats = %+v", st)
	}
}

// TestDroppedWithoutStream: when no stream can be opened, the subscription
// and each tick's report are dropped, and every tick tries again.
func TestDroppedWithoutStream(t *testing.T) {
	clock := envoysim.NewManualClock(time.Unix(1_000_000, 0))
	dials := 0
	env, err := envoysim.New(envoysim.Config{Domain: "d"}, clock, func(context.Context) (envoysim.Stream, error) {
		dials++
		return nil, status.Error(codes.Unavailable, "down")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	env.Request(idA)
	for range 2 {
		clock.Advance(5 * time.Second)
		env.Step()
	}
	if st := env.Stats(); st.DroppedReports != 3 || dials != 3 || st.Reports != 0 {
		t.Errorf("stats = %+v after %d dials", st, dials)
	}
}

// TestLatency: a response is applied Latency after it arrives; until then
// the new bucket is decided by no_assignment_behavior.
func TestLatency(t *testing.T) {
	h := newHarness(t, envoysim.Config{Latency: 50 * time.Millisecond})
	h.env.Request(idA)
	h.srv.next(t)
	h.srv.send(t, &rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{
		assignment(idA, 30*time.Second, blanket(typev3.RateLimitStrategy_DENY_ALL))}})
	if !h.env.Await(5 * time.Second) {
		t.Fatal("response not received")
	}
	h.advance(40 * time.Millisecond)
	if !h.env.Request(idA) {
		t.Fatal("the assignment applied before its latency")
	}
	h.advance(10 * time.Millisecond)
	if h.env.Request(idA) {
		t.Fatal("the assignment (DENY_ALL) not applied after its latency")
	}
}

// TestCreateGap: the requests of a new bucket before the main thread
// creates it pass by no_assignment_behavior; the subscription counts the
// first, the next report the others.
func TestCreateGap(t *testing.T) {
	h := newHarness(t, envoysim.Config{CreateGap: 20 * time.Millisecond})
	for i := range 5 {
		if !h.env.Request(idA) {
			t.Fatalf("request %d denied before the bucket exists", i)
		}
	}
	h.srv.none(t)
	h.advance(20 * time.Millisecond)
	if u := usageOf(t, h.srv.next(t), idA); u.GetNumRequestsAllowed() != 1 {
		t.Fatalf("subscription = %v, want the first request", u)
	}
	h.advance(5 * time.Second)
	if u := usageOf(t, h.srv.next(t), idA); u.GetNumRequestsAllowed() != 4 {
		t.Errorf("report = %v, want the 4 requests before the bucket was created", u)
	}
}
