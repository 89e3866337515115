package envoysim

import (
	"context"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Traffic is requests at a rate from one Envoy into one bucket, spread evenly.
type Traffic struct {
	Envoy  *Envoy
	Bucket map[string]string

	mu   sync.Mutex
	rate float64
	acc  float64 // requests owed, a fraction of one
}

// SetRate changes the traffic's rate.
func (t *Traffic) SetRate(rate float64) {
	t.mu.Lock()
	t.rate = rate
	t.mu.Unlock()
}

// due returns the whole requests owed after d more.
func (t *Traffic) due(d time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acc += t.rate * d.Seconds()
	n := math.Floor(t.acc)
	t.acc -= n
	return int(n)
}

// Fleet runs Envoys and their traffic in steps of time, from one goroutine.
type Fleet struct {
	Step time.Duration // between two rounds of timers and requests (default 10ms)
	// Await bounds, in real time, the wait for the server's answer to a
	// report (default 5s); Unanswered counts the answers that did not come.
	Await      time.Duration
	Unanswered int
	// Quiet is, after a round in which the server was sent or sent
	// something, how long in real time no message must arrive before the
	// clock moves on (default 5ms, at most a second in all), so that the
	// server's pushes land at the time they were sent. Idle, if set, must
	// report the servers idle too (rlqs.Service.Idle), and Tally, if set,
	// no push in flight; either is waited for up to 10 s.
	Quiet time.Duration
	Idle  func() bool
	Tally *Tally

	mu      sync.Mutex // envoys and traffic, for RunRealtime beside a test's calls
	envoys  []*Envoy
	traffic []*Traffic
}

// Add adds Envoys to the fleet.
func (f *Fleet) Add(e ...*Envoy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.envoys = append(f.envoys, e...)
}

// Remove takes an Envoy out of the fleet, with its traffic, and closes it.
func (f *Fleet) Remove(e *Envoy) {
	f.Pause(e)
	e.Close()
}

// Pause takes an Envoy out of the fleet, with its traffic, and leaves its
// stream open: an Envoy that hangs, silent.
func (f *Fleet) Pause(e *Envoy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.envoys = deleteFunc(f.envoys, func(x *Envoy) bool { return x == e })
	f.traffic = deleteFunc(f.traffic, func(t *Traffic) bool { return t.Envoy == e })
}

func deleteFunc[T any](s []T, del func(T) bool) []T {
	out := s[:0]
	for _, x := range s {
		if !del(x) {
			out = append(out, x)
		}
	}
	return out
}

// Send adds traffic of rate requests per second from e into a bucket.
func (f *Fleet) Send(e *Envoy, bucket map[string]string, rate float64) *Traffic {
	t := &Traffic{Envoy: e, Bucket: bucket, rate: rate}
	f.mu.Lock()
	f.traffic = append(f.traffic, t)
	f.mu.Unlock()
	return t
}

func (f *Fleet) step() time.Duration {
	if f.Step <= 0 {
		return 10 * time.Millisecond
	}
	return f.Step
}

// Run advances clock by d in steps; at each, the Envoys run what is due,
// send their traffic, and wait for the server to answer their reports.
func (f *Fleet) Run(clock *ManualClock, d time.Duration) {
	step := f.step()
	await := f.Await
	if await <= 0 {
		await = 5 * time.Second
	}
	for done := time.Duration(0); done < d; done += step {
		clock.Advance(step)
		before := f.traffic0()
		f.round(step)
		for _, e := range f.envoys {
			if !e.Settle(await) {
				f.Unanswered++
			}
		}
		idle := f.idle()
		if f.drain() > 0 || f.traffic0() != before || !idle {
			f.quiesce()
		}
	}
}

// traffic0 counts the messages the Envoys sent and received.
func (f *Fleet) traffic0() int {
	n := 0
	for _, e := range f.envoys {
		n += e.messages()
	}
	return n
}

// quiesce applies the messages that arrive until none has for Quiet.
func (f *Fleet) quiesce() {
	quiet, limit := f.Quiet, time.Second
	if quiet <= 0 {
		quiet = 5 * time.Millisecond
	}
	// Servers that say whether they are busy are waited for longer: on a
	// loaded machine their goroutines may not run for a while, and the
	// clock must not move on without them.
	if f.Idle != nil || f.Tally != nil {
		quiet, limit = time.Millisecond, 10*time.Second
	}
	start, last := time.Now(), time.Now()
	for time.Since(start) < limit {
		time.Sleep(quiet / 10)
		// Idle first: what it saw delivered is in the inboxes drained next.
		if !f.idle() {
			last = time.Now()
		}
		if f.drain() > 0 {
			last = time.Now()
		}
		if time.Since(last) >= quiet {
			return
		}
	}
}

// idle reports whether the servers say they are idle (Idle) and none of
// their pushes is in flight (Tally), as far as the fleet knows.
func (f *Fleet) idle() bool {
	return (f.Idle == nil || f.Idle()) && (f.Tally == nil || f.Tally.Pending() == 0)
}

// drain applies the messages waiting at every Envoy, and counts them.
func (f *Fleet) drain() int {
	n := 0
	for _, e := range f.envoys {
		n += e.drain()
	}
	return n
}

// round runs one step's timers, messages and requests.
func (f *Fleet) round(step time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.envoys {
		e.Step()
	}
	for _, t := range f.traffic {
		for n := t.due(step); n > 0; n-- {
			t.Envoy.Request(t.Bucket)
		}
	}
}

// RunRealtime runs the fleet of WallClock Envoys for d, or until ctx ends.
func (f *Fleet) RunRealtime(ctx context.Context, d time.Duration) {
	step := f.step()
	tick := time.NewTicker(step)
	defer tick.Stop()
	end := time.After(d)
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end:
			return
		case now := <-tick.C:
			f.round(now.Sub(last))
			last = now
		}
	}
}

// Violations sums the violations every Envoy of the fleet counted.
func (f *Fleet) Violations() Violations {
	var v Violations
	for _, e := range f.envoys {
		v = v.Add(e.Violations())
	}
	return v
}

// GRPCDialer opens streams on one connection.
func GRPCDialer(cc grpc.ClientConnInterface) Dialer {
	c := rlqspb.NewRateLimitQuotaServiceClient(cc)
	return func(ctx context.Context) (Stream, error) {
		return c.StreamRateLimitQuotas(ctx)
	}
}

// FailoverDialer opens streams on the first of conns, from first on, that
// accepts one, as an Envoy cluster of several RLQS endpoints does.
func FailoverDialer(first int, conns ...grpc.ClientConnInterface) Dialer {
	dialers := make([]Dialer, len(conns))
	for i, cc := range conns {
		dialers[i] = GRPCDialer(cc)
	}
	return Failover(first, dialers...)
}

// Failover opens streams with the first of dialers, from first on, that
// opens one.
func Failover(first int, dialers ...Dialer) Dialer {
	return func(ctx context.Context) (Stream, error) {
		var err error
		for i := range dialers {
			var s Stream
			if s, err = dialers[(first+i)%len(dialers)](ctx); err == nil {
				return s, nil
			}
		}
		return nil, err
	}
}

// InProcess serves the services register registers on an in-memory
// listener, and returns a connection to them and the server; both close
// when the test ends.
func InProcess(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) (*grpc.ClientConn, *grpc.Server) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(opts...)
	register(gs)
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///in-process",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		gs.Stop()
	})
	return cc, gs
}
