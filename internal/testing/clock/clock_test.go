package clock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/clock"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// received returns what ch holds now, without waiting.
func received(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

// TestAdvanceFiresInOrder: timers fire once the clock reaches them, in
// the order of their times (then of their starts), each seeing its own
// time, however far one Advance goes.
func TestAdvanceFiresInOrder(t *testing.T) {
	c := clock.New(start)
	var order []string
	var at []time.Duration
	record := func(name string) func() {
		return func() { order = append(order, name); at = append(at, c.Since(start)) }
	}
	c.AfterFunc(3*time.Second, record("c"))
	c.AfterFunc(time.Second, record("a"))
	c.AfterFunc(2*time.Second, record("b1"))
	c.AfterFunc(2*time.Second, record("b2"))
	after := c.After(2 * time.Second)
	c.Advance(time.Second - 1)
	if len(order) != 0 {
		t.Fatalf("fired %v before their time", order)
	}
	c.Advance(10 * time.Second)
	if want := []string{"a", "b1", "b2", "c"}; !slices.Equal(order, want) {
		t.Errorf("fired %v, want %v", order, want)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second}; !slices.Equal(at, want) {
		t.Errorf("fired at %v, want %v", at, want)
	}
	if v, ok := received(after); !ok || !v.Equal(start.Add(2*time.Second)) {
		t.Errorf("After's channel holds %v, %v; want the time it fired", v, ok)
	}
	if got := c.Since(start); got != 11*time.Second-1 {
		t.Errorf("clock moved %v, want %v", got, 11*time.Second-1)
	}
	if c.Waiters() != 0 {
		t.Errorf("%d waiters after all fired", c.Waiters())
	}
}

func TestTimerStopAndReset(t *testing.T) {
	c := clock.New(start)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Error("Stop of a pending timer reported it was not pending")
	}
	if tm.Stop() {
		t.Error("second Stop reported the timer pending")
	}
	c.Advance(time.Hour)
	if _, ok := received(tm.C()); ok {
		t.Error("a stopped timer fired")
	}
	if tm.Reset(time.Second) {
		t.Error("Reset of a stopped timer reported it was pending")
	}
	c.Advance(time.Second)
	// Fired, unread: a Reset leaves no stale value, as time.Timer since Go 1.23.
	if tm.Reset(time.Minute) {
		t.Error("Reset of a fired timer reported it was pending")
	}
	if _, ok := received(tm.C()); ok {
		t.Error("a stale value after Reset")
	}
	c.Advance(time.Minute - 1)
	if _, ok := received(tm.C()); ok {
		t.Error("the reset timer fired early")
	}
	if !tm.Reset(2 * time.Second) {
		t.Error("Reset of a pending timer reported it was not pending")
	}
	c.Advance(2 * time.Second)
	if v, ok := received(tm.C()); !ok || !v.Equal(c.Now()) {
		t.Errorf("reset timer: %v, %v; want to fire at %v", v, ok, c.Now())
	}
}

// TestZeroFiresAtOnce: as on the wall clock, a timer of zero or less
// fires without an Advance.
func TestZeroFiresAtOnce(t *testing.T) {
	c := clock.New(start)
	if _, ok := received(c.After(0)); !ok {
		t.Error("After(0) did not fire at once")
	}
	tm := c.NewTimer(time.Hour)
	tm.Reset(-time.Second)
	if v, ok := received(tm.C()); !ok || !v.Equal(start) {
		t.Errorf("Reset(-1s): %v, %v; want to fire at once", v, ok)
	}
	ran := make(chan struct{})
	c.AfterFunc(0, func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(clock.Patience):
		t.Error("AfterFunc(0) did not run")
	}
	if c.Waiters() != 0 {
		t.Errorf("%d waiters", c.Waiters())
	}
}

func TestTicker(t *testing.T) {
	c := clock.New(start)
	tk := c.NewTicker(time.Second)
	var got []time.Duration
	for range 3 {
		c.Advance(time.Second)
		v, ok := received(tk.C())
		if !ok {
			t.Fatal("no tick")
		}
		got = append(got, v.Sub(start))
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("ticks at %v, want %v", got, want)
	}
	c.Advance(5 * time.Second) // the reader is behind: one tick kept
	if v, ok := received(tk.C()); !ok || !v.Equal(start.Add(4*time.Second)) {
		t.Errorf("after a long advance: %v, %v; want the first tick missed", v, ok)
	}
	if _, ok := received(tk.C()); ok {
		t.Error("a slow reader got more than one tick")
	}
	tk.Reset(time.Minute)
	c.Advance(59 * time.Second)
	if _, ok := received(tk.C()); ok {
		t.Error("a tick before the new period")
	}
	c.Advance(time.Second)
	if _, ok := received(tk.C()); !ok {
		t.Error("no tick after the new period")
	}
	tk.Stop()
	c.Advance(time.Hour)
	if _, ok := received(tk.C()); ok || c.Waiters() != 0 {
		t.Errorf("a stopped ticker ticked (%v) or waits (%d)", ok, c.Waiters())
	}
}

// TestBlockUntil: a test waits until the code under test waits on the
// clock, then advances it; Sleep returns then.
func TestBlockUntil(t *testing.T) {
	c := clock.New(start)
	woke, begin := make(chan time.Duration), make(chan struct{})
	go func() {
		<-begin
		c.Sleep(time.Second)
		woke <- c.Since(start)
	}()
	close(begin) // most likely, BlockUntil waits before Sleep starts
	c.BlockUntil(t, 1)
	if got := c.Pending(); !slices.Equal(got, []time.Duration{time.Second}) {
		t.Fatalf("Pending = %v, want [1s]", got)
	}
	c.Advance(time.Second)
	select {
	case d := <-woke:
		if d != time.Second {
			t.Errorf("woke at %v, want 1s", d)
		}
	case <-time.After(clock.Patience):
		t.Fatal("Sleep did not return")
	}
}

func TestWaitContextEnds(t *testing.T) {
	c := clock.New(start)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := c.WaitContext(ctx, func(p []time.Duration) bool { return len(p) > 0 })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitContext with nothing waiting = %v, want the deadline", err)
	}
}

func TestAdvanceNextAndStarted(t *testing.T) {
	c := clock.New(start)
	if _, ok := c.AdvanceNext(); ok {
		t.Error("AdvanceNext with nothing pending reported a move")
	}
	tm := c.NewTimer(time.Hour)
	c.After(3 * time.Second)
	tm.Reset(2 * time.Hour)
	if got := c.Started(); got != 3 {
		t.Errorf("Started = %d, want 3 (two timers, one reset)", got)
	}
	if d, ok := c.AdvanceNext(); !ok || d != 3*time.Second {
		t.Errorf("AdvanceNext = %v, %v; want 3s", d, ok)
	}
	if d, ok := c.AdvanceNext(); !ok || d != 2*time.Hour-3*time.Second {
		t.Errorf("AdvanceNext = %v, %v; want to the reset timer", d, ok)
	}
}

// consumer is how code under test declares the clock it needs.
type consumer interface {
	Now() time.Time
	After(time.Duration) <-chan time.Time
	NewTimer(time.Duration) interface {
		C() <-chan time.Time
		Reset(time.Duration) bool
		Stop() bool
	}
	AfterFunc(time.Duration, func()) interface {
		C() <-chan time.Time
		Reset(time.Duration) bool
		Stop() bool
	}
}

var _ consumer = (*clock.Clock)(nil)
