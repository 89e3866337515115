package envoysim

import (
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/pkg/clock"
)

// Clock tells an Envoy the time.
type Clock interface {
	Now() time.Time
}

// WallClock is the real time.
type WallClock = clock.Wall

// ManualClock moves only when told to. It is safe for concurrent use, so
// a server under test can share it (rlqs.Clock: its timers fire as
// Advance passes them).
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*manualTimer]struct{}
}

type manualTimer struct {
	c  *ManualClock
	at time.Time // guarded by c.mu
	f  func()
}

// NewManualClock returns a clock stopped at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, timers: map[*manualTimer]struct{}{}}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, and calls the functions of the
// timers it passes, each in a goroutine of its own.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for t := range c.timers {
		if !t.at.After(c.now) {
			delete(c.timers, t)
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// AfterFunc calls f, in a goroutine of its own, once the clock has
// passed d from now, unless the Timer is stopped first. The Timer's C is
// nil, as time.AfterFunc's.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &manualTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// C returns nil: an AfterFunc timer has no channel.
func (t *manualTimer) C() <-chan time.Time { return nil }

// Stop reports whether it stopped the call of f.
func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	return ok
}

// Reset calls f once the clock has passed d from now (at once, in a
// goroutine of its own, if d <= 0) and reports whether the timer was
// pending.
func (t *manualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	if d <= 0 {
		go t.f()
		return ok
	}
	t.at = t.c.now.Add(d)
	t.c.timers[t] = struct{}{}
	return ok
}
