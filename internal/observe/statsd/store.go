// Package statsd keeps named counters, gauges and timers and sends them to
// a statsd server, in the lines of lyft/gostats (envoyproxy/ratelimit's) or DogStatsD.
package statsd

import (
	"sync"
	"sync/atomic"
)

// Counter is a named, monotonic counter. Its methods are safe for
// concurrent use and do not allocate.
type Counter struct {
	name string
	v    atomic.Uint64
	sent uint64 // what a Client has sent; only Client.Flush touches it
}

// Name returns the counter's stat name.
func (c *Counter) Name() string { return c.name }

// Add adds n; the total wraps past 2^64, so callers bound n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Value returns the total counted.
func (c *Counter) Value() uint64 { return c.v.Load() }

// Set sets the total, mirroring one kept elsewhere; it must not go down.
func (c *Counter) Set(n uint64) { c.v.Store(n) }

// Store holds counters, gauges and timers, never removed (as in gostats).
// It is safe for concurrent use.
type Store struct {
	mu     sync.RWMutex
	byName map[string]*Counter
	all    []*Counter // in creation order
	gauges []*Gauge   // in creation order
	timers []*Timer   // in creation order
	gens   []func()   // run before every export: they set gauges and counters
	flush  sync.Mutex // serialises Client flushes, which own Counter.sent
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{byName: map[string]*Counter{}} }

// Gauge returns a new gauge named name, for a generator to set.
func (s *Store) Gauge(name string) *Gauge { return add(s, &s.gauges, &Gauge{name: name}) }

// Gauges returns every gauge, in creation order.
func (s *Store) Gauges() []*Gauge { return list(s, &s.gauges) }

// Timer returns a new timer named name.
func (s *Store) Timer(name string) *Timer { return add(s, &s.timers, &Timer{name: name}) }

// Timers returns every timer, in creation order.
func (s *Store) Timers() []*Timer { return list(s, &s.timers) }

// AddGenerator adds gen, which sets stats from state kept elsewhere.
func (s *Store) AddGenerator(gen func()) { add(s, &s.gens, gen) }

// Generate runs the generators; every export calls it first.
func (s *Store) Generate() {
	for _, g := range list(s, &s.gens) {
		g()
	}
}

// add appends v to one of s's lists under its lock, and returns v.
func add[T any](s *Store, to *[]T, v T) T {
	s.mu.Lock()
	*to = append(*to, v)
	s.mu.Unlock()
	return v
}

// list copies one of s's lists under its read lock.
func list[T any](s *Store, from *[]T) []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]T(nil), *from...)
}

// Counter returns the counter named name, creating it if need be.
func (s *Store) Counter(name string) *Counter {
	s.mu.RLock()
	c := s.byName[name]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c = s.byName[name]; c == nil {
		c = &Counter{name: name}
		s.byName[name] = c
		s.all = append(s.all, c)
	}
	return c
}

// Counters returns every counter, in creation order, in a new slice.
func (s *Store) Counters() []*Counter {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*Counter(nil), s.all...)
}

// Len returns how many counters the store holds.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.all)
}
