// Package breaker wraps a limiter.Store in a circuit breaker that fails
// calls at once while the store is known to be down.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/pkg/clock"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrOpen, returned while the circuit is open, wraps limiter.ErrUnavailable.
var ErrOpen = fmt.Errorf("circuit open: %w", limiter.ErrUnavailable)

// State is the breaker's state.
type State int32

// States.
const (
	Closed   State = iota // calls go through
	Open                  // calls fail at once; a probe comes every Cooldown
	HalfOpen              // open, and a probe is checking the store
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Defaults of Options.
const (
	DefaultFailures     = 5
	DefaultCooldown     = 500 * time.Millisecond
	DefaultProbeTimeout = 100 * time.Millisecond
)

// Options configure a Breaker. Zero values take the defaults.
type Options struct {
	Failures     int           // independent failures in a row that open the circuit
	Cooldown     time.Duration // between probes, and between two state changes
	ProbeTimeout time.Duration // bounds each probe (on the wall clock)
	Clock        Clock         // spaces probes and state changes (default: the wall clock)
	// OnChange, if set, is called when the circuit opens and when it
	// closes, outside any lock and never twice at once.
	OnChange func(from, to State)
}

// Clock is the time a Breaker reads and its prober waits on.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Prober is a store that can show it decides, not only that it answers;
// the Breaker probes with Probe if its store has it, else with Ping. Probe
// must not count against any caller's limit.
type Prober interface {
	Probe(ctx context.Context) error
}

// Breaker is a limiter.Store that forwards to another until Failures
// independent failures in a row (calls that started after the last failure
// counted; not context.Canceled or limiter.ErrNotAllOrNothing), then answers
// ErrOpen at once while it probes the store every Cooldown; the first
// probe that succeeds closes it. It changes state at most once per
// Cooldown, and is safe for concurrent use (docs/design.md#circuit-breaker).
type Breaker struct {
	store limiter.Store
	opts  Options

	state atomic.Int32  // a State: read on every call
	gen   atomic.Uint64 // failures counted so far, ever: a call's ticket
	fails atomic.Int64  // failures counted since the last success

	mu      sync.Mutex // guards the transitions, changed, life and closed
	change  sync.Mutex // serialises OnChange calls
	changed time.Time  // when the circuit last opened or closed
	life    context.Context
	cancel  context.CancelFunc
	closed  bool
	wg      sync.WaitGroup
}

var _ limiter.Store = (*Breaker)(nil)

// New wraps store. It starts nothing.
func New(store limiter.Store, opts Options) *Breaker {
	if opts.Failures <= 0 {
		opts.Failures = DefaultFailures
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = DefaultCooldown
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.Wall{}
	}
	b := &Breaker{store: store, opts: opts}
	b.life, b.cancel = context.WithCancel(context.Background())
	return b
}

// Open also stops the prober when ctx ends; it may be left out.
func (b *Breaker) Open(ctx context.Context) error {
	context.AfterFunc(ctx, b.cancel)
	return nil
}

// State returns the current state, for metrics.
func (b *Breaker) State() State { return State(b.state.Load()) }

func (b *Breaker) setState(s State) { b.state.Store(int32(s)) }

// Take forwards to the store unless the circuit is open.
func (b *Breaker) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	ticket, err := b.admit()
	if err != nil {
		return err
	}
	err = b.store.Take(ctx, ops, results)
	b.record(ticket, err)
	return err
}

func (b *Breaker) admit() (uint64, error) {
	if b.State() != Closed {
		return 0, ErrOpen
	}
	return b.gen.Load(), nil
}

// record counts a failure unless another was counted since ticket.
func (b *Breaker) record(ticket uint64, err error) {
	switch {
	case err == nil:
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
	case errors.Is(err, context.Canceled), errors.Is(err, limiter.ErrNotAllOrNothing):
	case b.gen.CompareAndSwap(ticket, ticket+1):
		if b.fails.Add(1) >= int64(b.opts.Failures) {
			b.trip()
		}
	}
}

// trip opens the circuit, unless it closed less than a Cooldown ago.
func (b *Breaker) trip() {
	b.mu.Lock()
	now := b.opts.Clock.Now()
	if b.State() != Closed || b.closed || !b.changed.IsZero() && now.Sub(b.changed) < b.opts.Cooldown {
		b.mu.Unlock()
		return
	}
	b.changed = now
	b.setState(Open)
	b.wg.Add(1)
	go b.probe(b.life)
	b.notifyUnlock(Closed, Open)
}

// probe checks the store every Cooldown until a check succeeds or ctx ends.
func (b *Breaker) probe(ctx context.Context) {
	defer b.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.opts.Clock.After(b.opts.Cooldown):
		}
		b.setState(HalfOpen)
		pctx, cancel := context.WithTimeout(ctx, b.opts.ProbeTimeout)
		var err error
		if p, ok := b.store.(Prober); ok {
			err = p.Probe(pctx)
		} else {
			err = b.store.Ping(pctx)
		}
		cancel()
		if err != nil {
			b.setState(Open)
			continue
		}
		b.mu.Lock()
		b.fails.Store(0)
		b.changed = b.opts.Clock.Now()
		b.setState(Closed)
		b.notifyUnlock(Open, Closed)
		return
	}
}

// notifyUnlock releases b.mu and reports, in order, a transition made under it.
func (b *Breaker) notifyUnlock(from, to State) {
	if b.opts.OnChange == nil {
		b.mu.Unlock()
		return
	}
	b.change.Lock()
	b.mu.Unlock()
	defer b.change.Unlock()
	b.opts.OnChange(from, to)
}

// Ping pings the store itself, open circuit or not.
func (b *Breaker) Ping(ctx context.Context) error { return b.store.Ping(ctx) }

// Close stops and waits for the prober, then closes the store.
func (b *Breaker) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	return b.store.Close()
}
