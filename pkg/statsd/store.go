// Package statsd keeps named counters and sends what they counted to a
// statsd server, in the line format of lyft/gostats (the stats library of
// envoyproxy/ratelimit) or of DogStatsD.
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

// Store holds counters by name. It is safe for concurrent use. Counters
// are never removed, as gostats never removes them.
type Store struct {
	mu     sync.RWMutex
	byName map[string]*Counter
	all    []*Counter // in creation order
	flush  sync.Mutex // serialises Client flushes, which own Counter.sent
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{byName: map[string]*Counter{}} }

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

// Counters returns every counter, in creation order. The slice is the
// caller's; the counters are shared.
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
