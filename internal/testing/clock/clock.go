// Package clock is the tests' fake clock: its time moves only when a test
// advances it, its timers fire then, in order, and a test can wait until
// the code under test waits on it, so that every step is deterministic.
//
// Code under test declares the clock it needs where it uses it, with the
// method signatures of Clock's (Now, After, NewTimer, NewTicker,
// AfterFunc), and defaults to pkg/clock's Wall. Timer and Ticker are
// aliases of interface literals, Timer the same as pkg/clock's: a package
// that declares the same literal (under any name) shares the type, so
// that *Clock satisfies its interface without either importing the other.
package clock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// Timer is a timer of a Clock: *time.Timer's methods, with C a method.
type Timer = interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// Ticker is a ticker of a Clock: *time.Ticker's methods, with C a method.
type Ticker = interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// Patience bounds how long BlockUntil waits for the code under test.
const Patience = 30 * time.Second

// Clock is a fake clock, stopped until Advance. It is safe for concurrent
// use; its zero value is not usable.
type Clock struct {
	advancing sync.Mutex // serialises Advance

	mu      sync.Mutex
	now     time.Time
	waiters []*waiter     // pending, in no order
	seq     uint64        // orders waiters due at the same time
	started int           // timers started or reset, ever
	changed chan struct{} // closed, and replaced, when waiters change
}

// waiter is a pending timer, ticker, After or AfterFunc.
type waiter struct {
	at     time.Time
	seq    uint64
	period time.Duration  // a ticker's; 0 for a timer
	ch     chan time.Time // nil for AfterFunc
	fn     func()
}

// New returns a Clock stopped at start.
func New(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since returns the time elapsed on the clock since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// After returns a channel that receives the clock's time once it has
// moved d.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// Sleep blocks until the clock has moved d.
func (c *Clock) Sleep(d time.Duration) { <-c.After(d) }

// NewTimer returns a Timer that fires once the clock has moved d. As
// time.Timer since Go 1.23, no stale value is received after Stop or
// Reset returns.
func (c *Clock) NewTimer(d time.Duration) Timer {
	t := &timer{c: c, w: &waiter{ch: make(chan time.Time, 1)}}
	c.start(t.w, d)
	return t
}

// AfterFunc returns a Timer that calls f once the clock has moved d. f
// runs on the goroutine that calls Advance, before Advance returns.
func (c *Clock) AfterFunc(d time.Duration, f func()) Timer {
	t := &timer{c: c, w: &waiter{fn: f}}
	c.start(t.w, d)
	return t
}

// NewTicker returns a Ticker that fires every d of the clock's time; like
// time.Ticker, it drops ticks that its reader is too slow for.
func (c *Clock) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &ticker{c: c, w: &waiter{ch: make(chan time.Time, 1), period: d}}
	c.start(t.w, d)
	return t
}

// Advance moves the clock by d, and fires in order the timers due on the
// way, each at its own time (a ticker as many times as it is due).
// AfterFunc functions run before Advance returns. The clock never goes
// back: a negative d panics.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("clock: Advance by a negative duration")
	}
	c.advancing.Lock()
	defer c.advancing.Unlock()
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		w := c.next(end)
		if w == nil {
			break
		}
		if w.at.After(c.now) {
			c.now = w.at
		}
		if w.period > 0 {
			w.at = w.at.Add(w.period)
		} else {
			c.remove(w)
		}
		if w.fn != nil {
			c.mu.Unlock()
			w.fn()
			c.mu.Lock()
			continue
		}
		select {
		case w.ch <- c.now:
		default: // a ticker's reader is behind
		}
	}
	if end.After(c.now) {
		c.now = end
	}
	c.mu.Unlock()
}

// AdvanceNext moves the clock to the earliest pending timer and fires it
// (and any other due then); it returns how far the clock moved, and false
// if nothing was waiting.
func (c *Clock) AdvanceNext() (time.Duration, bool) {
	c.mu.Lock()
	w := c.next(time.Time{})
	var d time.Duration
	if w != nil {
		d = max(w.at.Sub(c.now), 0)
	}
	c.mu.Unlock()
	if w == nil {
		return 0, false
	}
	c.Advance(d)
	return d, true
}

// Waiters returns how many timers, tickers, Afters and Sleeps are
// pending.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// Pending returns the time left of each pending waiter, shortest first.
func (c *Clock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending()
}

// Started returns how many timers and tickers were started or reset
// (After and Sleep included) since New: a count that tells a test the code
// under test (re)armed one, even where the number pending stays the same.
func (c *Clock) Started() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// BlockUntil waits until at least n waiters are pending: until the code
// under test waits on the clock. It fails t after Patience.
func (c *Clock) BlockUntil(t testing.TB, n int) {
	t.Helper()
	c.WaitFor(t, fmt.Sprintf("%d waiters", n), func(pending []time.Duration) bool { return len(pending) >= n })
}

// WaitFor waits until cond holds of the time left of the pending waiters
// (shortest first), checked each time they change; it fails t, naming
// what, after Patience.
func (c *Clock) WaitFor(t testing.TB, what string, cond func(pending []time.Duration) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	if err := c.WaitContext(ctx, cond); err != nil {
		t.Fatalf("clock: waiting for %s: %v (pending: %v)", what, err, c.Pending())
	}
}

// WaitContext waits until cond holds of the pending waiters, as WaitFor,
// or until ctx ends. cond may call the Clock's methods.
func (c *Clock) WaitContext(ctx context.Context, cond func(pending []time.Duration) bool) error {
	for {
		c.mu.Lock()
		pending, changed := c.pending(), c.changed
		c.mu.Unlock()
		if cond(pending) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// pending returns what Pending does; c.mu is held.
func (c *Clock) pending() []time.Duration {
	left := make([]time.Duration, len(c.waiters))
	for i, w := range c.waiters {
		left[i] = w.at.Sub(c.now)
	}
	slices.Sort(left)
	return left
}

// next returns the earliest waiter due at or before end (any, for a zero
// end); c.mu is held.
func (c *Clock) next(end time.Time) *waiter {
	var first *waiter
	for _, w := range c.waiters {
		if first == nil || w.at.Before(first.at) || w.at.Equal(first.at) && w.seq < first.seq {
			first = w
		}
	}
	if first == nil || !end.IsZero() && first.at.After(end) {
		return nil
	}
	return first
}

// start (re)arms w to fire after d; it reports whether w was pending. As
// a wall clock timer, one of d <= 0 fires at once (an AfterFunc's f on a
// goroutine of its own).
func (c *Clock) start(w *waiter, d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.remove(w)
	drain(w.ch)
	c.seq++
	c.started++
	w.at, w.seq = c.now.Add(max(d, 0)), c.seq
	switch {
	case d > 0 || w.period > 0:
		c.waiters = append(c.waiters, w)
	case w.fn != nil:
		go w.fn()
	default:
		w.ch <- c.now // drained above: never blocks
	}
	c.notify()
	return was
}

// stop removes w; it reports whether w was pending.
func (c *Clock) stop(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	drain(w.ch)
	return c.remove(w)
}

// remove takes w off the pending waiters; c.mu is held.
func (c *Clock) remove(w *waiter) bool {
	i := slices.Index(c.waiters, w)
	if i < 0 {
		return false
	}
	c.waiters = slices.Delete(c.waiters, i, i+1)
	c.notify()
	return true
}

// notify wakes the WaitContext calls; c.mu is held.
func (c *Clock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func drain(ch chan time.Time) {
	if ch == nil {
		return
	}
	select {
	case <-ch:
	default:
	}
}

type timer struct {
	c *Clock
	w *waiter
}

func (t *timer) C() <-chan time.Time        { return t.w.ch }
func (t *timer) Stop() bool                 { return t.c.stop(t.w) }
func (t *timer) Reset(d time.Duration) bool { return t.c.start(t.w, d) }

type ticker struct {
	c *Clock
	w *waiter
}

func (t *ticker) C() <-chan time.Time { return t.w.ch }
func (t *ticker) Stop()               { t.c.stop(t.w) }

// Reset stops the ticker and starts it again with period d.
func (t *ticker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	t.c.mu.Lock()
	t.w.period = d
	t.c.mu.Unlock()
	t.c.start(t.w, d)
}
