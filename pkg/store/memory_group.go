package store

import (
	"slices"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// hasJoint reports whether ops hold a joint (limiter.Op.Joined).
func hasJoint(ops []limiter.Op) bool {
	return slices.ContainsFunc(ops, func(op limiter.Op) bool { return op.Joined })
}

// jointEnd returns the end of the joint that starts at ops[i]: i+1 for an
// op on its own.
func jointEnd(ops []limiter.Op, i int) int {
	j := i + 1
	for j < len(ops) && ops[j].Joined {
		j++
	}
	return j
}

// denied reports whether a result of a joint is a denial.
func denied(results []limiter.Result) bool {
	return slices.ContainsFunc(results, func(r limiter.Result) bool { return !r.Allowed })
}

// takeJoints decides ops as take does, each joint as one step that writes
// nothing when one of its ops is denied.
func (m *Memory) takeJoints(ops []limiter.Op, results []limiter.Result) {
	single := 0 // the first op on its own not yet decided
	for i := 0; i < len(ops); {
		j := jointEnd(ops, i)
		if j == i+1 {
			i = j
			continue
		}
		m.take(ops[single:i], results[single:i])
		at := m.now().UnixMilli()
		now := ops[i].Now
		if now == 0 {
			now = at
		}
		joint, res := ops[i:j], results[i:j]
		m.decideAll(joint, res, now, at, func() bool { return denied(res) })
		i, single = j, j
	}
	m.take(ops[single:], results[single:])
}

// saved is the state of a joint's keys in a stage, before its decisions.
type saved struct {
	windows []savedWindow
	buckets []savedBucket
}

type savedWindow struct {
	k  windowKey
	c  counter
	ok bool
}

type savedBucket struct {
	k  string
	b  bucket
	ok bool
}

// save returns the state ops may change at now: each window op's counters
// of this window and the two before it, each bucket op's bucket.
func (s *memShard) save(ops []limiter.Op, now int64) saved {
	var sv saved
	for i := range ops {
		op := &ops[i]
		if op.Algorithm == descriptors.TokenBucket {
			b, ok := s.buckets[op.Key]
			sv.buckets = append(sv.buckets, savedBucket{op.Key, b, ok})
			continue
		}
		ws, _ := window(op, now)
		prev := windowBefore(op, ws)
		for _, start := range [...]int64{ws, prev, windowBefore(op, prev)} {
			k := windowKey{op.Key, start}
			c, ok := s.windows[k]
			sv.windows = append(sv.windows, savedWindow{k, c, ok})
		}
	}
	return sv
}

// restore puts back what save returned, the earliest state of a key last.
func (s *memShard) restore(sv saved) {
	for i := len(sv.windows) - 1; i >= 0; i-- {
		if w := sv.windows[i]; w.ok {
			s.windows[w.k] = w.c
		} else {
			delete(s.windows, w.k)
		}
	}
	for i := len(sv.buckets) - 1; i >= 0; i-- {
		if b := sv.buckets[i]; b.ok {
			s.buckets[b.k] = b.b
		} else {
			delete(s.buckets, b.k)
		}
	}
}
