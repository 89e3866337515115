package statsd

import (
	"sync"
	"sync/atomic"
)

// maxTimerValues bounds the values a Timer keeps between two flushes.
const maxTimerValues = 4096

// Timer is a named timer whose values a Client sends as timer lines
// ("name:12|ms"), one per value, as gostats sends each value of
// envoyproxy/ratelimit's response timer. Between two flushes it keeps at
// most maxTimerValues values: past them it keeps a uniform sample of all
// it was given (reservoir sampling), and the lines carry the sample rate
// ("name:12|ms|@0.25") so that a statsd server counts the rest. Values a
// failed flush could not send are dropped, as gostats drops them. Its
// methods are safe for concurrent use.
type Timer struct {
	name string
	mu   sync.Mutex
	vals []uint64
	seen uint64 // values added since the last take
	rnd  uint64 // xorshift state of the sampling
}

// Name returns the timer's stat name.
func (t *Timer) Name() string { return t.name }

// Add records one value.
func (t *Timer) Add(v uint64) {
	t.mu.Lock()
	t.seen++
	if len(t.vals) < maxTimerValues {
		t.vals = append(t.vals, v)
	} else if j := t.next() % t.seen; j < maxTimerValues {
		t.vals[j] = v
	}
	t.mu.Unlock()
}

// next is a xorshift64 step; t.mu is held.
func (t *Timer) next() uint64 {
	if t.rnd == 0 {
		t.rnd = 0x9e3779b97f4a7c15
	}
	t.rnd ^= t.rnd << 13
	t.rnd ^= t.rnd >> 7
	t.rnd ^= t.rnd << 17
	return t.rnd
}

// take returns the values kept and how many were added, and starts over.
func (t *Timer) take() ([]uint64, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	vals, seen := t.vals, t.seen
	t.vals, t.seen = nil, 0
	return vals, seen
}

// Gauge is a named gauge: a Client sends its value at every flush
// ("name:N|g"), as gostats sends gauges whether they changed or not.
type Gauge struct {
	name string
	v    atomic.Uint64
}

// Name returns the gauge's stat name.
func (g *Gauge) Name() string { return g.name }

// Set sets the gauge's value.
func (g *Gauge) Set(v uint64) { g.v.Store(v) }

// Value returns the gauge's value.
func (g *Gauge) Value() uint64 { return g.v.Load() }
