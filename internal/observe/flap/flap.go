// Package flap logs the changes of state of a condition that may flap:
// the first change at once, later ones at most once per interval, with a
// count of the changes since the last line.
package flap

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fastlimit/fastlimit/pkg/clock"
)

// DefaultEvery is the interval of New's callers that have no reason to
// choose another.
const DefaultEvery = 10 * time.Second

// Condition is a condition that is up or down, reported at each
// observation. A change is logged at once if no line was written for
// Every, else with the first observation Every after the last line; that
// line carries "changes", the changes since the line before. It is safe
// for concurrent use; its zero value is not usable.
type Condition struct {
	log   *zap.Logger
	every time.Duration
	clock Clock

	mu      sync.Mutex
	down    bool      // the state last observed
	last    time.Time // of the last line
	changes int       // since the last line
	// With WithFlush: the line of the state last observed, held back,
	// and the timer that writes it.
	flush   bool
	held    func(n int)
	pending bool
}

// Clock is a Condition's time, and the timers of WithFlush.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// WithFlush makes c write a change it held back once the interval is
// over even if nothing is observed again, on its clock's timers: a caller
// that observes only changes needs it, or a last change could go
// unlogged. It returns c.
func (c *Condition) WithFlush() *Condition {
	c.flush = true
	return c
}

// New returns a Condition, up, that logs to log at most once per every,
// on clock (nil: the wall clock).
func New(log *zap.Logger, every time.Duration, clk Clock) *Condition {
	if clk == nil {
		clk = clock.Wall{}
	}
	return &Condition{log: log, every: every, clock: clk}
}

// Down observes the condition down; msg and fields describe it, logged
// at warn level if a line is due. It reports whether the state changed.
func (c *Condition) Down(msg string, fields ...zap.Field) bool {
	return c.observe(true, zapcore.WarnLevel, msg, fields)
}

// Up observes the condition up; msg and fields describe it, logged at
// info level if a line is due. It reports whether the state changed.
func (c *Condition) Up(msg string, fields ...zap.Field) bool {
	return c.observe(false, zapcore.InfoLevel, msg, fields)
}

func (c *Condition) observe(down bool, level zapcore.Level, msg string, fields []zap.Field) bool {
	c.mu.Lock()
	changed := down != c.down
	c.down = down
	if changed {
		c.changes++
	}
	now := c.clock.Now()
	write := func(n int) {
		if ce := c.log.Check(level, msg); ce != nil {
			ce.Write(append(fields, zap.Int("changes", n))...)
		}
	}
	due := c.changes > 0 && (c.last.IsZero() || now.Sub(c.last) >= c.every)
	if !due {
		if c.changes > 0 && c.flush {
			c.held = write
			if !c.pending {
				c.pending = true
				c.clock.AfterFunc(c.every-now.Sub(c.last), c.flushHeld)
			}
		}
		c.mu.Unlock()
		return changed
	}
	n := c.changes
	c.changes, c.last, c.held = 0, now, nil
	c.mu.Unlock()
	write(n)
	return changed
}

// flushHeld writes the line held back, if a change is still unlogged.
func (c *Condition) flushHeld() {
	c.mu.Lock()
	write, n := c.held, c.changes
	c.pending, c.held = false, nil
	if write == nil || n == 0 {
		c.mu.Unlock()
		return
	}
	c.changes, c.last = 0, c.clock.Now()
	c.mu.Unlock()
	write(n)
}
