package store

import "time"

// batchClock is the time a batcher reads and waits on: the wall clock, or a
// test's (internal/testing/clock, whose Timer is the same interface
// literal).
type batchClock interface {
	Now() time.Time
	NewTimer(d time.Duration) batchTimer
}

// batchTimer is a batchClock's timer: *time.Timer's methods, with C a method.
type batchTimer = interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// wallClock is the time package's clock.
type wallClock struct{}

func (wallClock) Now() time.Time                      { return time.Now() }
func (wallClock) NewTimer(d time.Duration) batchTimer { return wallTimer{time.NewTimer(d)} }

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time        { return w.t.C }
func (w wallTimer) Reset(d time.Duration) bool { return w.t.Reset(d) }
func (w wallTimer) Stop() bool                 { return w.t.Stop() }
