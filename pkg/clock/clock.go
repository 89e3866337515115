// Package clock is the wall clock that FastLimit's time-dependent parts
// run on unless given another: rlqs.Options.Clock when nil, and the Redis
// store's batching. A part that takes a clock declares the interface it
// needs, some of Wall's methods; to run one on a clock of your own (a
// test's, stepped by hand), give it a value with those methods.
package clock

import "time"

// Timer is a clock's timer: *time.Timer's methods, with C a method. It
// is an alias of an interface literal, so that a clock of your own whose
// timers are the same literal under any name satisfies the same
// interfaces without importing this package.
type Timer = interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// Wall is the system's clock, the time package's. Its zero value is ready
// and safe for concurrent use.
type Wall struct{}

// Now returns time.Now().
func (Wall) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (Wall) After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTimer returns time.NewTimer(d) as a Timer.
func (Wall) NewTimer(d time.Duration) Timer { return wallTimer{time.NewTimer(d)} }

// AfterFunc returns time.AfterFunc(d, f) as a Timer: f runs in a
// goroutine of its own, and C is nil.
func (Wall) AfterFunc(d time.Duration, f func()) Timer { return wallTimer{time.AfterFunc(d, f)} }

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time        { return w.t.C }
func (w wallTimer) Reset(d time.Duration) bool { return w.t.Reset(d) }
func (w wallTimer) Stop() bool                 { return w.t.Stop() }
