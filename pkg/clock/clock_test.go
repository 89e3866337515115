package clock_test

import (
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/clock"
)

// patience bounds every wait for the wall clock: far beyond the
// milliseconds asked, for a busy machine.
const patience = 30 * time.Second

// consumer is how a part declares the clock it needs (each uses some of
// these methods).
type consumer interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
	NewTimer(d time.Duration) interface {
		C() <-chan time.Time
		Reset(d time.Duration) bool
		Stop() bool
	}
	AfterFunc(d time.Duration, f func()) interface {
		C() <-chan time.Time
		Reset(d time.Duration) bool
		Stop() bool
	}
}

var _ consumer = clock.Wall{}

func receive(t *testing.T, c <-chan time.Time, what string) time.Time {
	t.Helper()
	select {
	case at := <-c:
		return at
	case <-time.After(patience):
		t.Fatalf("%s: nothing received within %v", what, patience)
		return time.Time{}
	}
}

func TestWall(t *testing.T) {
	var w clock.Wall
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Now is the time package's", func(t *testing.T) {
			before := time.Now()
			now := w.Now()
			if now.Before(before) || now.After(time.Now()) {
				t.Errorf("Now = %v, not between two calls of time.Now", now)
			}
		}},
		{"After fires", func(t *testing.T) {
			start := time.Now()
			if at := receive(t, w.After(time.Millisecond), "After"); at.Sub(start) < time.Millisecond {
				t.Errorf("After fired %v after the call, before its 1ms", at.Sub(start))
			}
		}},
		{"a timer fires", func(t *testing.T) {
			start := time.Now()
			tm := w.NewTimer(time.Millisecond)
			if at := receive(t, tm.C(), "NewTimer"); at.Sub(start) < time.Millisecond {
				t.Errorf("the timer fired %v after the call, before its 1ms", at.Sub(start))
			}
			if tm.Stop() {
				t.Error("Stop of a fired timer reported it stopped it")
			}
		}},
		{"Stop prevents firing", func(t *testing.T) {
			tm := w.NewTimer(time.Hour)
			if !tm.Stop() {
				t.Fatal("Stop of a pending timer reported it had fired or was stopped")
			}
			if tm.Stop() {
				t.Error("a second Stop reported it stopped the timer")
			}
			select {
			case <-tm.C():
				t.Error("a stopped timer delivered a value")
			default:
			}
		}},
		{"Reset re-arms", func(t *testing.T) {
			tm := w.NewTimer(time.Hour)
			if !tm.Reset(time.Millisecond) {
				t.Error("Reset of a pending timer reported it was not pending")
			}
			receive(t, tm.C(), "the reset timer")
		}},
		{"AfterFunc runs f", func(t *testing.T) {
			ran := make(chan time.Time, 1)
			tm := w.AfterFunc(time.Millisecond, func() { ran <- time.Now() })
			if tm.C() != nil {
				t.Error("an AfterFunc timer has a channel")
			}
			receive(t, ran, "AfterFunc's f")
		}},
		{"AfterFunc's Stop prevents f", func(t *testing.T) {
			tm := w.AfterFunc(time.Hour, func() { t.Error("f of a stopped AfterFunc ran") })
			if !tm.Stop() {
				t.Error("Stop of a pending AfterFunc reported it had run or was stopped")
			}
		}},
		{"AfterFunc's Reset re-arms", func(t *testing.T) {
			ran := make(chan time.Time, 1)
			tm := w.AfterFunc(time.Hour, func() { ran <- time.Now() })
			if !tm.Reset(time.Millisecond) {
				t.Error("Reset of a pending AfterFunc reported it was not pending")
			}
			receive(t, ran, "the reset AfterFunc's f")
		}},
	} {
		t.Run(tc.name, tc.run)
	}
}
