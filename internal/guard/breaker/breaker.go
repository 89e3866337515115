// Package breaker wraps a limiter.Store in a circuit breaker, so that a
// dead or failing store costs callers nothing once it is known to be down.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrOpen is returned while the circuit is open. It wraps
// limiter.ErrUnavailable.
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
	// Failures is how many independent failures in a row open the
	// circuit (see Breaker). Default DefaultFailures.
	Failures int
	// Cooldown is the interval between the background probes of an open
	// circuit (the first comes Cooldown after the circuit opens), and the
	// shortest time between two state changes. Default DefaultCooldown.
	Cooldown time.Duration
	// ProbeTimeout bounds each probe's Ping. Default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// After is the clock the prober waits on (default time.After).
	After func(time.Duration) <-chan time.Time
	// Now is the clock that spaces state changes (default time.Now).
	Now func() time.Time
	// OnChange, if set, is called when the circuit opens (Closed to Open)
	// and when it closes again (Open to Closed), outside any lock and
	// never twice at once for one Breaker. Probes that fail do not call it.
	OnChange func(from, to State)
}

// Prober is a store that can show that it decides, not only that it
// answers: Probe does what Take does (for Redis, a script call that
// writes), so that a store that answers PING but fails every decision
// (Redis out of memory, a read-only replica) keeps the circuit open. The
// Breaker probes with Probe when its store has it, else with Ping. Probe
// may leave state behind that expires soon; it must not count against any
// caller's limit.
type Prober interface {
	Probe(ctx context.Context) error
}

// Breaker is a limiter.Store that forwards to another until the other is
// known to be down, then answers ErrOpen at once until a background probe
// finds it answering again. It is safe for concurrent use.
//
// The circuit opens on evidence that the store is down, not on one burst:
// it opens after Options.Failures independent failures in a row, where a
// failure is independent when its call started after the last failure
// that was counted. Calls that were in flight together when one
// connection reset, or one stall of the store, fail together and count
// once; a call that succeeds resets the count. A store that is down fails
// every call, so the count grows by one at least every time a call can
// fail (a refused connection: at once; a frozen store: once per store
// timeout), and the circuit opens after Failures of them. A caller's own
// cancellation (context.Canceled) and limiter.ErrNotAtomic (a wiring
// mistake) are no evidence either way; any other error is a failure.
//
// While the circuit is open, every call answers ErrOpen without touching
// the store, and a goroutine of the Breaker's own probes the store every
// Cooldown (Prober's Probe, or Ping), each probe bounded by ProbeTimeout.
// The first probe that succeeds closes the circuit, traffic or not; calls
// admitted from then on go to the store. No caller ever waits for a probe.
// The prober exists only while the circuit is open; Close stops it.
//
// The circuit changes state at most once per Cooldown: it closes no sooner
// than a Cooldown after it opened (the first probe), and a circuit closed
// less than a Cooldown ago opens on the first failure counted once that
// Cooldown has passed, not before; until then its calls go to the store.
// However the store fails (down, out of memory, now and then), the circuit
// moves at most once a Cooldown, and so logs and metrics do.
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
	if opts.After == nil {
		opts.After = time.After
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := &Breaker{store: store, opts: opts}
	b.life, b.cancel = context.WithCancel(context.Background())
	return b
}

// Open ties the prober's lifetime to ctx as well: when ctx ends, an open
// circuit stops probing (and stays open). It opens nothing else and may be
// left out; Close stops the prober either way.
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

// admit lets a call through while the circuit is closed, and returns its
// ticket: the number of failures counted when it started.
func (b *Breaker) admit() (uint64, error) {
	if b.State() != Closed {
		return 0, ErrOpen
	}
	return b.gen.Load(), nil
}

// record counts the outcome of a call admitted with ticket. A failure
// counts only when no other failure was counted since the call started.
func (b *Breaker) record(ticket uint64, err error) {
	switch {
	case err == nil:
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
	case errors.Is(err, context.Canceled), errors.Is(err, limiter.ErrNotAtomic):
		// The caller's doing or a wiring mistake: no evidence either way.
	case b.gen.CompareAndSwap(ticket, ticket+1):
		if b.fails.Add(1) >= int64(b.opts.Failures) {
			b.trip()
		}
	}
}

// trip opens a closed circuit and starts its prober, unless it closed less
// than a Cooldown ago: the failures stay counted, and the next failure
// counted tries again.
func (b *Breaker) trip() {
	b.mu.Lock()
	now := b.opts.Now()
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

// probe checks the store every Cooldown (Probe, or Ping) until a check
// succeeds, then closes the circuit. It returns early when ctx ends.
func (b *Breaker) probe(ctx context.Context) {
	defer b.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.opts.After(b.opts.Cooldown):
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
		b.changed = b.opts.Now()
		b.setState(Closed)
		b.notifyUnlock(Open, Closed)
		return
	}
}

// notifyUnlock releases b.mu and reports a transition made under it.
// Taking b.change before releasing b.mu keeps the reports in the order of
// the transitions.
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

// Ping forwards to the store: health checks see the store itself.
func (b *Breaker) Ping(ctx context.Context) error { return b.store.Ping(ctx) }

// Close stops the prober, waits for it (a Ping in progress is cancelled)
// and closes the store. A circuit open at Close stays open.
func (b *Breaker) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	return b.store.Close()
}
