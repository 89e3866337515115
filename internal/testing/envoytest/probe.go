package envoytest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// Probe is a RateLimitService of the test's own that records what Envoy
// sends: each request and the deadline it came with. It answers OK unless
// given an answer function. Tests of Envoy's own behaviour (the default
// timeout, which descriptors and hits_addend a configuration sends) use
// it where FastLimit's answers would hide what was asked.
type Probe struct {
	rlspb.UnimplementedRateLimitServiceServer
	// Addr is its loopback address (gRPC over plaintext HTTP/2).
	Addr   string
	answer func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse
	mu     sync.Mutex
	calls  []ProbeCall
}

// ProbeCall is one request a Probe received.
type ProbeCall struct {
	Request *rlspb.RateLimitRequest
	// Deadline is how long the call had left when it arrived (Envoy's
	// grpc-timeout less the transit); HasDeadline is false without one.
	Deadline    time.Duration
	HasDeadline bool
}

// StartProbe serves a Probe on a free loopback port until t ends; answer
// (nil: OK) makes each response.
func StartProbe(t testing.TB, answer func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse) *Probe {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Probe{Addr: l.Addr().String(), answer: answer}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, p)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return p
}

// ShouldRateLimit records the request and answers it.
func (p *Probe) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	c := ProbeCall{Request: proto.Clone(req).(*rlspb.RateLimitRequest)}
	if dl, ok := ctx.Deadline(); ok {
		c.Deadline, c.HasDeadline = time.Until(dl), true
	}
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.mu.Unlock()
	if p.answer != nil {
		return p.answer(req), nil
	}
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

// Calls returns the calls received so far, in order.
func (p *Probe) Calls() []ProbeCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProbeCall(nil), p.calls...)
}

// WaitCalls fails t unless at least n calls have arrived within d, and
// returns them all.
func (p *Probe) WaitCalls(t testing.TB, n int, d time.Duration) []ProbeCall {
	t.Helper()
	var got []ProbeCall
	if !wait.True(d, func() bool { got = p.Calls(); return len(got) >= n }) {
		t.Fatalf("probe: %d calls within %v, want %d", len(got), d, n)
	}
	return got
}
