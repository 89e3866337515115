package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/guard/breaker"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// patience bounds how long a test waits for something that must happen.
const patience = 30 * time.Second

func newClock() *clock.Clock { return clock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

// awaitWait waits until the prober waits on clk, and returns for how
// long.
func awaitWait(t *testing.T, clk *clock.Clock) time.Duration {
	t.Helper()
	clk.BlockUntil(t, 1)
	return clk.Pending()[0]
}

// gate is a store whose calls block until the test settles them, so that
// a test decides exactly which calls are in flight together. Pings answer
// by the store's health, or block while pingGate is set.
type gate struct {
	arrived  chan *call
	down     atomic.Bool
	pings    atomic.Int32
	takes    atomic.Int32
	pingGate chan struct{} // if not nil, Ping waits for it (or ctx)
}

func newGate() *gate { return &gate{arrived: make(chan *call, 1000)} }

type callKey struct{}

// call is one Take in flight: the test sends its outcome on settle, and
// reads what the Breaker answered from done.
type call struct {
	settle chan error
	done   chan error
}

func (g *gate) Take(ctx context.Context, _ []limiter.Op, _ []limiter.Result) error {
	g.takes.Add(1)
	c := ctx.Value(callKey{}).(*call)
	g.arrived <- c
	return <-c.settle
}

func (g *gate) Ping(ctx context.Context) error {
	g.pings.Add(1)
	if g.pingGate != nil {
		select {
		case <-g.pingGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if g.down.Load() {
		return limiter.ErrUnavailable
	}
	return nil
}

func (g *gate) Close() error { return nil }

// harness drives a Breaker over a gate, step by step.
type harness struct {
	t        *testing.T
	b        *breaker.Breaker
	g        *gate
	clock    *clock.Clock
	inflight []*call
	changes  chan string
}

func newHarness(t *testing.T, failures int) *harness {
	h := &harness{t: t, g: newGate(), clock: newClock(), changes: make(chan string, 100)}
	h.b = breaker.New(h.g, breaker.Options{
		Failures: failures, Cooldown: time.Second, ProbeTimeout: 100 * time.Millisecond, Clock: h.clock,
		OnChange: func(from, to breaker.State) { h.changes <- from.String() + ">" + to.String() },
	})
	t.Cleanup(func() {
		h.settle(nil) // release what is still in flight
		if err := h.b.Close(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// start begins n calls; it returns how many the circuit turned away.
func (h *harness) start(n int) (refused int) {
	h.t.Helper()
	for range n {
		c := &call{settle: make(chan error, 1), done: make(chan error, 1)}
		ctx := context.WithValue(context.Background(), callKey{}, c)
		go func() { c.done <- h.b.Take(ctx, nil, nil) }()
		select {
		case <-h.g.arrived:
			h.inflight = append(h.inflight, c)
		case err := <-c.done:
			if !errors.Is(err, breaker.ErrOpen) {
				h.t.Fatalf("a call the store never saw answered %v", err)
			}
			refused++
		case <-time.After(patience):
			h.t.Fatal("a call neither reached the store nor returned")
		}
	}
	return refused
}

// settle ends every call in flight with err, in start order, and waits for
// each to return from the Breaker.
func (h *harness) settle(err error) {
	h.t.Helper()
	for _, c := range h.inflight {
		c.settle <- err
		if got := <-c.done; got != err {
			h.t.Fatalf("the Breaker answered %v for a call the store answered %v", got, err)
		}
	}
	h.inflight = nil
}

// once runs one call alone, settled with err.
func (h *harness) once(err error) {
	h.t.Helper()
	if h.start(1) != 0 {
		h.t.Fatal("the circuit turned a call away")
	}
	h.settle(err)
}

var errReset = fmt.Errorf("connection reset: %w", limiter.ErrUnavailable)

// TestBreakerCountsIndependentFailures: failures of calls that were in
// flight together count once; failures spread over time count each.
func TestBreakerCountsIndependentFailures(t *testing.T) {
	type step struct {
		start  int   // calls to start (0: none)
		settle error // then settle everything in flight with this, if not nil
		ok     bool  // or settle everything in flight with success
	}
	fail := func(n int) step { return step{start: n, settle: errReset} }
	cases := []struct {
		name  string
		steps []step
		want  breaker.State
	}{
		{"one reset fails 30 calls in flight", []step{fail(30)}, breaker.Closed},
		{"two resets' worth of calls", []step{fail(30), fail(30)}, breaker.Closed},
		{"five failures one after another", []step{fail(1), fail(1), fail(1), fail(1), fail(1)}, breaker.Open},
		{"five bursts one after another", []step{fail(20), fail(20), fail(20), fail(20), fail(20)}, breaker.Open},
		{"a success in between resets the count", []step{fail(1), fail(1), fail(1), fail(1),
			{start: 1, ok: true}, fail(1), fail(1), fail(1), fail(1)}, breaker.Closed},
		// Five stalls of the store: each fails the calls in flight, then
		// traffic flows again.
		{"five stalls between successes", []step{fail(40), {start: 10, ok: true}, fail(40), {start: 10, ok: true},
			fail(40), {start: 10, ok: true}, fail(40), {start: 10, ok: true}, fail(40), {start: 10, ok: true}}, breaker.Closed},
		{"cancelled calls are no evidence", []step{{start: 1, settle: context.Canceled}, {start: 1, settle: context.Canceled},
			{start: 1, settle: context.Canceled}, {start: 1, settle: context.Canceled}, {start: 1, settle: context.Canceled}}, breaker.Closed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 5)
			for i, s := range tc.steps {
				if refused := h.start(s.start); refused != 0 {
					t.Fatalf("step %d: %d calls turned away", i, refused)
				}
				switch {
				case s.ok:
					h.settle(nil)
				case s.settle != nil:
					h.settle(s.settle)
				}
			}
			if got := h.b.State(); got != tc.want {
				t.Fatalf("state %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBreakerOverlappingWaves: a call that started before the last counted
// failure does not count, even when it fails later.
func TestBreakerOverlappingWaves(t *testing.T) {
	h := newHarness(t, 2)
	h.start(3)
	first := h.inflight
	h.start(3)
	second := h.inflight[3:]
	h.inflight = first
	h.settle(errReset) // counts once
	h.inflight = second
	h.settle(errReset) // started before that count: no evidence
	if h.b.State() != breaker.Closed {
		t.Fatal("calls in flight during one failure counted twice")
	}
	h.once(errReset) // started after it: the second failure
	if h.b.State() != breaker.Open {
		t.Fatalf("state %v after two independent failures", h.b.State())
	}
}

// TestBreakerProbesWithoutTraffic steps the prober's clock with no calls at
// all: a failed probe keeps the circuit open, the first good one closes it
// within one Cooldown of the store's return.
func TestBreakerProbesWithoutTraffic(t *testing.T) {
	h := newHarness(t, 3)
	for range 3 {
		h.once(errReset)
	}
	if got := <-h.changes; got != "closed>open" {
		t.Fatalf("first change %q", got)
	}
	if h.start(5) != 5 || h.g.takes.Load() != 3 {
		t.Fatal("an open circuit let calls through")
	}
	h.g.down.Store(true)
	steps := []struct {
		advance   time.Duration
		down      bool
		wantPings int32
		want      breaker.State
	}{
		{time.Second - time.Millisecond, true, 0, breaker.Open}, // not yet
		{time.Millisecond, true, 1, breaker.Open},               // probe fails
		{time.Second, true, 2, breaker.Open},                    // and again
		{time.Second, false, 3, breaker.Closed},                 // back within one Cooldown
	}
	if d := awaitWait(t, h.clock); d != time.Second {
		t.Fatalf("the prober waits %v, want the cooldown", d)
	}
	var pings int32 // after the step before
	for i, s := range steps {
		h.g.down.Store(s.down)
		h.clock.Advance(s.advance)
		if s.wantPings > pings {
			// The probe runs: wait for its outcome (the prober waiting
			// again, with its next timer set, or the circuit closing),
			// whether or not its ping is already counted.
			if s.want == breaker.Closed {
				awaitChange(t, h.changes, "open>closed", fmt.Sprintf("step %d: the circuit closing", i))
			} else {
				awaitWait(t, h.clock) // the prober waits again
			}
		}
		if got := h.g.pings.Load(); got != s.wantPings {
			t.Fatalf("step %d: %d pings, want %d", i, got, s.wantPings)
		}
		pings = s.wantPings
		if got := h.b.State(); got != s.want {
			t.Fatalf("step %d: state %v, want %v", i, got, s.want)
		}
	}
	if h.g.takes.Load() != 3 {
		t.Fatal("the breaker called Take on its own")
	}
	h.once(nil) // calls go through again
	select {
	case c := <-h.changes:
		t.Fatalf("unexpected change %q", c)
	default:
	}
}

// TestBreakerProbeNeverBlocksACaller holds a probe's Ping: meanwhile every
// call answers ErrOpen at once, without reaching the store.
func TestBreakerProbeNeverBlocksACaller(t *testing.T) {
	h := newHarness(t, 1)
	h.g.pingGate = make(chan struct{})
	h.once(errReset)
	awaitWait(t, h.clock)
	h.clock.Advance(time.Second)
	if !wait.True(patience, func() bool { return h.g.pings.Load() > 0 }) {
		t.Fatal("no probe")
	}
	if h.b.State() != breaker.HalfOpen {
		t.Fatalf("state %v during a probe", h.b.State())
	}
	// The probe's Ping is held: calls return anyway.
	if refused := h.start(100); refused != 100 {
		t.Fatalf("%d of 100 calls answered ErrOpen during a probe", refused)
	}
	close(h.g.pingGate)
	if got := <-h.changes; got != "closed>open" {
		t.Fatalf("change %q", got)
	}
	awaitChange(t, h.changes, "open>closed", "the probe closing the circuit")
}

// awaitChange waits (patience at most) for the next state change on
// changes, and fails t unless it is want.
func awaitChange(t *testing.T, changes <-chan string, want, what string) {
	t.Helper()
	select {
	case got := <-changes:
		if got != want {
			t.Fatalf("%s: change %q, want %q", what, got, want)
		}
	case <-time.After(patience):
		t.Fatalf("%s: no change within %v", what, patience)
	}
}

// TestBreakerProbeTimeout: a Ping that hangs is bounded by ProbeTimeout
// and the circuit stays open.
func TestBreakerProbeTimeout(t *testing.T) {
	h := newHarness(t, 1)
	h.g.pingGate = make(chan struct{}) // never released
	h.once(errReset)
	awaitWait(t, h.clock)
	h.clock.Advance(time.Second)
	awaitWait(t, h.clock) // the hung Ping gave up; the prober waits again
	if h.g.pings.Load() != 1 || h.b.State() != breaker.Open {
		t.Fatalf("%d pings, state %v", h.g.pings.Load(), h.b.State())
	}
}

// TestBreakerCloseStopsTheProber: Close ends an open circuit's prober,
// whether it waits on the clock or in a Ping.
func TestBreakerCloseStopsTheProber(t *testing.T) {
	for _, inPing := range []bool{false, true} {
		t.Run(fmt.Sprintf("in ping %v", inPing), func(t *testing.T) {
			g, clk := newGate(), newClock()
			g.pingGate = make(chan struct{})
			b := breaker.New(g, breaker.Options{Failures: 1, ProbeTimeout: time.Hour, Clock: clk})
			c := &call{settle: make(chan error, 1)}
			c.settle <- errReset
			_ = b.Take(context.WithValue(context.Background(), callKey{}, c), nil, nil)
			<-g.arrived
			awaitWait(t, clk)
			if inPing {
				clk.Advance(breaker.DefaultCooldown)
				wait.For(t, patience, func() bool { return g.pings.Load() > 0 })
			}
			done := make(chan error, 1)
			go func() { done <- b.Close() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(patience):
				t.Fatal("Close hangs on the prober")
			}
		})
	}
}

// TestBreakerOpenContextStopsTheProber: the context given to Open bounds
// the prober too.
func TestBreakerOpenContextStopsTheProber(t *testing.T) {
	g, clk := newGate(), newClock()
	b := breaker.New(g, breaker.Options{Failures: 1, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.Open(ctx); err != nil {
		t.Fatal(err)
	}
	c := &call{settle: make(chan error, 1)}
	c.settle <- errReset
	_ = b.Take(context.WithValue(context.Background(), callKey{}, c), nil, nil)
	<-g.arrived
	awaitWait(t, clk)
	cancel()
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatal("Close hangs")
	}
	if g.pings.Load() != 0 {
		t.Fatal("a probe ran after the context ended")
	}
}

// flaky fails at random, for the race detector: many callers, trips and
// probes at once.
type flaky struct{ rate atomic.Int64 } // failures per 1000

func (f *flaky) Take(context.Context, []limiter.Op, []limiter.Result) error {
	if rand.Int64N(1000) < f.rate.Load() {
		return errReset
	}
	return nil
}

func (f *flaky) Ping(context.Context) error {
	if rand.Int64N(1000) < f.rate.Load() {
		return errReset
	}
	return nil
}

func (f *flaky) Close() error { return nil }

func TestBreakerConcurrent(t *testing.T) {
	store := &flaky{}
	var opens, closes atomic.Int32
	b := breaker.New(store, breaker.Options{Failures: 3, Cooldown: time.Millisecond,
		OnChange: func(from, to breaker.State) {
			if to == breaker.Open {
				opens.Add(1)
			} else {
				closes.Add(1)
			}
		}})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if i == 500 && w == 0 {
					store.rate.Store(1000) // down
				}
				if i == 1500 && w == 0 {
					store.rate.Store(100) // mostly back
				}
				err := b.Take(context.Background(), nil, nil)
				if err != nil && !errors.Is(err, limiter.ErrUnavailable) {
					t.Errorf("Take: %v", err)
					return
				}
				_ = b.TakeAll(context.Background(), nil, nil)
				_ = b.State()
			}
		}()
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if opens.Load() == 0 {
		t.Fatal("a store down for a thousand calls never opened the circuit")
	}
	if d := opens.Load() - closes.Load(); d != 0 && d != 1 {
		t.Fatalf("%d opens, %d closes", opens.Load(), closes.Load())
	}
}

func TestErrOpenIsUnavailable(t *testing.T) {
	if !errors.Is(breaker.ErrOpen, limiter.ErrUnavailable) {
		t.Fatal("ErrOpen must wrap limiter.ErrUnavailable")
	}
	for s, want := range map[breaker.State]string{breaker.Closed: "closed", breaker.Open: "open", breaker.HalfOpen: "half-open"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q", s, s.String())
		}
	}
}
