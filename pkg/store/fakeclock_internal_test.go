package store

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// fakeClock is a clock that moves only when a test advances it, for the
// batcher's tests: a small stand-in for internal/testing/clock (its
// methods and semantics), until that package is on main.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // pending
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock by d and fires the timers due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool {
		if t.at.After(c.now) {
			return false
		}
		select {
		case t.ch <- c.now:
		default:
		}
		return true
	})
}

// Pending returns the time left of each pending timer, shortest first.
func (c *fakeClock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var left []time.Duration
	for _, t := range c.timers {
		left = append(left, t.at.Sub(c.now))
	}
	slices.Sort(left)
	return left
}

// BlockUntil waits until n timers are pending: the code under test waits.
func (c *fakeClock) BlockUntil(t *testing.T, n int) {
	t.Helper()
	if !wait.True(30*time.Second, func() bool { return len(c.Pending()) >= n }) {
		t.Fatalf("%d timers pending, want %d", len(c.Pending()), n)
	}
}

type fakeTimer struct {
	c  *fakeClock
	ch chan time.Time
	at time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) bool {
	was := t.Stop()
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.at = t.c.now.Add(d)
	if d <= 0 {
		t.ch <- t.c.now
		return was
	}
	t.c.timers = append(t.c.timers, t)
	return was
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	select {
	case <-t.ch:
	default:
	}
	n := len(t.c.timers)
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *fakeTimer) bool { return x == t })
	return len(t.c.timers) < n
}
