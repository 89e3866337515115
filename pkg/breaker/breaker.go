// Package breaker wraps a limiter.Store in a circuit breaker, so that a
// dead or failing store costs callers nothing once it is known to be down.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrOpen is returned while the circuit is open. It wraps
// limiter.ErrUnavailable.
var ErrOpen = fmt.Errorf("circuit open: %w", limiter.ErrUnavailable)

// State is the breaker's state.
type State int

// States.
const (
	Closed   State = iota // calls go through
	Open                  // calls fail at once
	HalfOpen              // one probe is checking the store
)

func (s State) String() string {
	return [...]string{"closed", "open", "half-open"}[s]
}

// Options configure a Breaker.
type Options struct {
	// Failures is how many consecutive failed calls open the circuit
	// (default 5).
	Failures int
	// Cooldown is how long the circuit stays open before a probe
	// (default 1s).
	Cooldown time.Duration
	// ProbeTimeout bounds the probe's Ping (default 100ms).
	ProbeTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnChange, if set, is called (outside the lock) on every state change.
	OnChange func(from, to State)
}

// Breaker is a limiter.Store that forwards to another until it fails
// Failures times in a row; then it fails calls at once with ErrOpen for
// Cooldown, after which one caller probes the store with Ping: success
// closes the circuit, failure opens it for another Cooldown. It is safe
// for concurrent use.
type Breaker struct {
	store limiter.Store
	opts  Options

	mu       sync.Mutex
	state    State
	failures int
	openedAt time.Time
}

var _ limiter.Store = (*Breaker)(nil)

// New wraps store.
func New(store limiter.Store, opts Options) *Breaker {
	if opts.Failures <= 0 {
		opts.Failures = 5
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = time.Second
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 100 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Breaker{store: store, opts: opts}
}

// State returns the current state.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Take forwards to the store unless the circuit is open.
func (b *Breaker) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if err := b.admit(ctx); err != nil {
		return err
	}
	err := b.store.Take(ctx, ops, results)
	b.record(err)
	return err
}

// admit decides whether a call may go to the store, probing it when the
// cooldown has passed.
func (b *Breaker) admit(ctx context.Context) error {
	b.mu.Lock()
	switch {
	case b.state == Closed:
		b.mu.Unlock()
		return nil
	case b.state == HalfOpen || b.opts.Now().Sub(b.openedAt) < b.opts.Cooldown:
		b.mu.Unlock()
		return ErrOpen
	}
	b.state = HalfOpen
	b.mu.Unlock()
	b.notify(Open, HalfOpen)

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.ProbeTimeout)
	err := b.store.Ping(pctx)
	cancel()
	b.mu.Lock()
	if err != nil {
		b.state, b.openedAt = Open, b.opts.Now()
		b.mu.Unlock()
		b.notify(HalfOpen, Open)
		return ErrOpen
	}
	b.state, b.failures = Closed, 0
	b.mu.Unlock()
	b.notify(HalfOpen, Closed)
	return nil
}

// record counts a call's outcome. Only store failures count: a caller's
// own cancellation says nothing about the store.
func (b *Breaker) record(err error) {
	if err != nil && errors.Is(err, context.Canceled) {
		return
	}
	b.mu.Lock()
	if err == nil {
		b.failures = 0
		b.mu.Unlock()
		return
	}
	b.failures++
	if b.state != Closed || b.failures < b.opts.Failures {
		b.mu.Unlock()
		return
	}
	b.state, b.openedAt = Open, b.opts.Now()
	b.mu.Unlock()
	b.notify(Closed, Open)
}

func (b *Breaker) notify(from, to State) {
	if b.opts.OnChange != nil {
		b.opts.OnChange(from, to)
	}
}

// Ping forwards to the store: health checks see the store itself.
func (b *Breaker) Ping(ctx context.Context) error { return b.store.Ping(ctx) }

// Close closes the store.
func (b *Breaker) Close() error { return b.store.Close() }
