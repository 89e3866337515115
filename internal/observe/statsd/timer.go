package statsd

import (
	"sync"
	"sync/atomic"
)

const maxTimerValues = 4096 // the values a Timer keeps between two flushes

// Timer is a named timer, sent one line per value ("name:12|ms"). Past
// maxTimerValues between two flushes it keeps a uniform sample, and its
// lines carry the sample rate ("|@0.25"); values a failed flush could not
// send are dropped. Its methods are safe for concurrent use.
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

// Gauge is a named gauge, sent at every flush ("name:N|g").
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
