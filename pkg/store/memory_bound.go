package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrFull is returned, wrapped with limiter.ErrUnavailable, by a Memory
// holding MemoryOptions.MaxKeys entries for a call that would add one.
var ErrFull = errors.New("memory store full: --memory-max-keys entries held")

// fullSweepEvery spaces the sweeps a full Memory runs before refusing.
const fullSweepEvery = time.Second

// MemoryStats are a Memory's gauges and counters.
type MemoryStats struct {
	Keys    int64 // entries held, expired ones not yet dropped included
	Refused int64 // calls refused because the store was full
}

// Stats returns the store's gauges and counters, cheaply.
func (m *Memory) Stats() MemoryStats {
	return MemoryStats{Keys: m.keys.Load(), Refused: m.refused.Load()}
}

// room refuses ops that would add an entry to a full store, after a sweep.
// Calls in flight may still pass the bound.
func (m *Memory) room(ops []limiter.Op) error {
	if !m.full() || !m.grows(ops) {
		return nil
	}
	m.sweepFull()
	if m.full() && m.grows(ops) {
		m.refused.Add(1)
		return fmt.Errorf("%w: %w", limiter.ErrUnavailable, ErrFull)
	}
	return nil
}

func (m *Memory) full() bool { return m.shards[0].full() }

// sweepFull sweeps unless it did within fullSweepEvery; callers share one.
func (m *Memory) sweepFull() {
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	now := m.now()
	if !m.swept.IsZero() && now.Sub(m.swept) < fullSweepEvery && now.After(m.swept) {
		return
	}
	m.swept = now
	m.Sweep()
}

// grows reports whether a charge of ops would add an entry: its window or
// bucket is not held, nor replaces an expired one.
func (m *Memory) grows(ops []limiter.Op) bool {
	at := m.now().UnixMilli() // the store's time, by which ended windows go
	for i := range ops {
		op := &ops[i]
		if op.Cost <= 0 || op.Refund { // a peek or a refund adds nothing
			continue
		}
		now := op.Now
		if now == 0 {
			now = at
		}
		s := &m.shards[m.shardOf(op.Key)]
		var ws, ended int64 // the window, and the one its counter replaces
		switch op.Algorithm {
		case descriptors.FixedWindow:
			ws, _ = window(op, now)
			ended = windowBefore(op, ws)
		case descriptors.SlidingWindow:
			ws, _ = window(op, now)
			ended = windowBefore(op, windowBefore(op, ws))
		}
		s.mu.Lock()
		var held bool
		if op.Algorithm == descriptors.TokenBucket {
			_, held = s.buckets[op.Key]
		} else {
			held = s.hasWindow(windowKey{op.Key, ws}) || s.hasEnded(windowKey{op.Key, ended}, at)
		}
		s.mu.Unlock()
		if !held {
			return true
		}
	}
	return false
}

// full reports whether the shard's Memory holds MaxKeys entries or more.
func (s *memShard) full() bool { return s.max > 0 && s.keys.Load() >= s.max }

func (s *memShard) hasWindow(k windowKey) bool {
	_, ok := s.windows[k]
	return ok
}

// putWindow stores k and reports whether it is a new entry.
func (s *memShard) putWindow(k windowKey, c counter) bool {
	n := len(s.windows)
	s.windows[k] = c
	if len(s.windows) == n {
		return false
	}
	s.grew(1)
	return true
}

// hasEnded reports whether window k is held and expired by the store's
// clock at (as Sweep judges it).
func (s *memShard) hasEnded(k windowKey, at int64) bool {
	c, ok := s.windows[k]
	return ok && c.expireAt <= at
}

// dropEnded drops window k, which a new window of its key replaces, if it
// has expired by at (another window length on the key may still live).
func (s *memShard) dropEnded(k windowKey, at int64) {
	if s.hasEnded(k, at) {
		s.dropWindow(k)
	}
}

func (s *memShard) dropWindow(k windowKey) {
	n := len(s.windows)
	delete(s.windows, k)
	s.grew(int64(len(s.windows) - n))
}

func (s *memShard) putBucket(k string, b bucket) {
	n := len(s.buckets)
	s.buckets[k] = b
	s.grew(int64(len(s.buckets) - n))
}

func (s *memShard) dropBucket(k string) {
	n := len(s.buckets)
	delete(s.buckets, k)
	s.grew(int64(len(s.buckets) - n))
}

// grew counts d more entries held (fewer when negative).
func (s *memShard) grew(d int64) {
	if s.keys != nil && d != 0 {
		s.keys.Add(d)
	}
}
