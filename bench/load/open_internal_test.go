package load

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// fakeClient answers OK to every call once release is closed (at once
// when it is nil), and records the values it was sent.
type fakeClient struct {
	release  chan struct{}
	received atomic.Int64
	answered atomic.Int64
	mu       sync.Mutex
	values   []string
}

func (f *fakeClient) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest, _ ...grpc.CallOption) (*rls.RateLimitResponse, error) {
	f.received.Add(1)
	f.mu.Lock()
	for _, d := range req.GetDescriptors() {
		f.values = append(f.values, d.GetEntries()[0].GetValue())
	}
	f.mu.Unlock()
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.answered.Add(1)
	return &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK}, nil
}

func openGenerator(f *fakeClient, c Config) *Generator {
	c.Conns, c.Pick, c.Domain, c.EntryKeys, c.ValuePrefix = 1, PickUniform, "d", []string{"k"}, "user-"
	if c.Timeout == 0 {
		c.Timeout = time.Minute
	}
	if c.Keys == 0 {
		c.Keys = 1000
	}
	if c.Descriptors == 0 {
		c.Descriptors = 1
	}
	return &Generator{cfg: c, clients: []rls.RateLimitServiceClient{f}}
}

// An open loop's arrivals do not wait for answers: a server that answers
// nothing still receives them all, each in flight at once.
func TestOpenLoopSendsWhateverTheServerDoes(t *testing.T) {
	f := &fakeClient{release: make(chan struct{})}
	g := openGenerator(f, Config{Rate: 2000, Requests: 200})
	done := make(chan *Report)
	go func() { done <- g.Run(context.Background(), time.Minute) }()
	// 200 arrivals at 2,000/s take about 0.1 s; a closed loop of one
	// caller would have sent one.
	err := wait.Until(context.Background(), 30*time.Second, func() error {
		if n := f.received.Load(); n < 200 {
			return fmt.Errorf("%d requests received", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.answered.Load(); n != 0 {
		t.Fatalf("%d answered before release", n)
	}
	close(f.release)
	r := <-done
	if r.Requests != 200 || r.OK != 200 || r.Open == nil || r.Open.Arrivals != 200 || r.Open.Senders != 200 {
		t.Fatalf("requests %d, OK %d, open %+v: want 200 arrivals, each with its own sender", r.Requests, r.OK, r.Open)
	}
}

// A request's latency runs from its intended send time: one handed to a
// sender late counts the delay.
func TestOpenLoopLatencyFromIntendedTime(t *testing.T) {
	f := &fakeClient{}
	g := openGenerator(f, Config{Rate: 1})
	p := &openPhase{g: g, ctx: context.Background(), idle: make(chan arrival)}
	close(p.idle)
	p.wg.Add(1)
	p.sender(0, arrival{at: time.Now().Add(-50 * time.Millisecond)})
	if len(p.stats) != 1 || p.stats[0].ok != 1 {
		t.Fatalf("stats %+v, want one OK", p.stats)
	}
	if got := time.Duration(p.stats[0].hist.max); got < 50*time.Millisecond {
		t.Fatalf("latency %v of a request meant 50ms ago, want at least 50ms", got)
	}
}

// Arrivals come at the rate asked, whatever the pacing's precision, and
// the same Seed gives the same identifiers in the same order.
func TestOpenLoopRateAndDraws(t *testing.T) {
	const rate, d = 20000, 300 * time.Millisecond
	f := &fakeClient{}
	g := openGenerator(f, Config{Rate: rate, Keys: 10, Seed: 7})
	r := g.Run(context.Background(), d)
	want := rate * d.Seconds()
	if n := float64(r.Open.Arrivals); math.Abs(n-want) > 5*math.Sqrt(want) {
		t.Fatalf("%v arrivals in %v at %d/s, want %v within 5 sigma", n, d, rate, want)
	}
	if r.Requests != r.Open.Arrivals || r.Errors != 0 {
		t.Fatalf("%d requests (%d errors) for %d arrivals", r.Requests, r.Errors, r.Open.Arrivals)
	}
	count := map[string]int{}
	for _, v := range f.values {
		count[v]++
	}
	for i := range 10 {
		v := "user-" + string(rune('0'+i))
		if share := float64(count[v]) / float64(len(f.values)); share < 0.07 || share > 0.13 {
			t.Fatalf("identifier %s drawn %.3f of the time, want about 0.1 (%v)", v, share, count)
		}
	}
	// Another generator with the same seed: the same draws, arrival by
	// arrival, for the first phase.
	p1 := &openPhase{g: g, seed: mix(7, 1)}
	p2 := &openPhase{g: openGenerator(&fakeClient{}, Config{Rate: 5, Keys: 10, Seed: 7}), seed: mix(7, 1)}
	p3 := &openPhase{g: g, seed: mix(7, 2)}
	same, other := true, 0
	for n := range uint64(1000) {
		for k := range 3 {
			a, b, c := p1.identifier(n, k), p2.identifier(n, k), p3.identifier(n, k)
			same = same && a == b
			if a != c {
				other++
			}
		}
	}
	if !same || other < 2000 {
		t.Fatalf("same seed same draws: %v; the next phase differs in %d of 3000 draws", same, other)
	}
}
