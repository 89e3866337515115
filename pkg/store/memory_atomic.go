package store

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.AtomicStore = (*Memory)(nil)

// stagePool recycles the scratch shards TakeAll stages its writes in.
var stagePool = sync.Pool{New: func() any {
	return &memShard{windows: make(map[windowKey]counter), buckets: make(map[string]bucket)}
}}

// TakeAll decides ops all or nothing, as limiter.AtomicStore says: under
// the locks of their shards (taken in shard order), on a scratch copy of
// their state, written back only on commit. It fails as Take does.
func (m *Memory) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory take all: %w: %w", limiter.ErrUnavailable, err)
	}
	if err := checkAtomicOps(ops, results); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	if err := m.room(ops); err != nil {
		return fmt.Errorf("memory take all: %w", err)
	}
	at := m.now().UnixMilli() // the store's time
	now := ops[0].Now         // the ops' time, the store's unless they carry one
	if now == 0 {
		now = at
	}
	m.decideAll(ops, results, now, at, func() bool { return limiter.Rejects(ops, results[:len(ops)]) })
	return nil
}

// decideAll decides ops in order at now under the locks of their shards
// (taken in shard order), on a scratch copy of their state where a joint
// with a denied op is undone, and writes the copy back unless reject,
// called with the results in place, says not to; at is the store's time.
func (m *Memory) decideAll(ops []limiter.Op, results []limiter.Result, now, at int64, reject func() bool) {
	var locked uint64 // one bit per shard; memShards is 64
	for i := range ops {
		locked |= 1 << m.shardOf(ops[i].Key)
	}
	for set := locked; set != 0; set &= set - 1 {
		m.shards[bits.TrailingZeros64(set)].mu.Lock()
	}
	defer func() {
		for set := locked; set != 0; set &= set - 1 {
			m.shards[bits.TrailingZeros64(set)].mu.Unlock()
		}
	}()

	stage := stagePool.Get().(*memShard)
	defer func() {
		clear(stage.windows)
		clear(stage.buckets)
		stagePool.Put(stage)
	}()
	m.stage(stage, ops, now)
	for i := 0; i < len(ops); {
		j := jointEnd(ops, i)
		var undo saved
		if j > i+1 {
			undo = stage.save(ops[i:j], now)
		}
		for k := i; k < j; k++ {
			results[k] = stage.decide(&ops[k], now, at)
		}
		if j > i+1 && denied(results[i:j]) {
			stage.restore(undo)
			stage.debit(ops[i:j], now, at) // charged all the same
		}
		i = j
	}
	if reject() {
		// Nothing is written but the debit ops' charges, each as alone.
		if ops = debitOps(ops); len(ops) == 0 {
			return
		}
		clear(stage.windows)
		clear(stage.buckets)
		m.stage(stage, ops, now)
		stage.debit(ops, now, at)
	}
	m.commit(stage, ops, now, at)
}

// stage copies into stage the state ops may read at now.
func (m *Memory) stage(stage *memShard, ops []limiter.Op, now int64) {
	m.visit(ops, now, func(s *memShard, k, _ windowKey, _ bool) {
		if c, ok := s.windows[k]; ok {
			stage.windows[k] = c
		}
	}, func(s *memShard, k string) {
		if b, ok := s.buckets[k]; ok {
			stage.buckets[k] = b
		}
	})
}

// debit decides the debit charges of ops (limiter.Op.Debit; not a peek,
// nor a refund, which lands only with its call) again, as alone; their
// answers stand as first given.
func (s *memShard) debit(ops []limiter.Op, now, at int64) {
	for i := range ops {
		if debits(&ops[i]) {
			_ = s.decide(&ops[i], now, at)
		}
	}
}

// debits reports whether op is a debit's charge.
func debits(op *limiter.Op) bool { return op.Debit && op.Cost > 0 && !op.Refund }

// debitOps returns the debit charges of ops, nil if none.
func debitOps(ops []limiter.Op) []limiter.Op {
	var out []limiter.Op
	for i := range ops {
		if debits(&ops[i]) {
			out = append(out, ops[i])
		}
	}
	return out
}

// commit writes the staged state of ops' keys back to their shards.
func (m *Memory) commit(stage *memShard, ops []limiter.Op, now, at int64) {
	m.visit(ops, now, func(s *memShard, k, ended windowKey, replaces bool) {
		if c, ok := stage.windows[k]; ok {
			if s.putWindow(k, c) && replaces {
				s.dropEnded(ended, at)
			}
		} else {
			s.dropWindow(k)
		}
	}, func(s *memShard, k string) {
		if b, ok := stage.buckets[k]; ok {
			s.putBucket(k, b)
		} else {
			s.dropBucket(k)
		}
	})
}

func (m *Memory) shardOf(key string) uint64 {
	return maphash.String(m.seed, key) % memShards
}

// visit calls window and bucket for every state ops may read or write at
// now, with its shard; a current counter comes with the ended one it
// replaces (replaces true).
func (m *Memory) visit(ops []limiter.Op, now int64, counter func(s *memShard, k, ended windowKey, replaces bool), bucket func(*memShard, string)) {
	for i := range ops {
		op := &ops[i]
		s := &m.shards[m.shardOf(op.Key)]
		switch op.Algorithm {
		case descriptors.FixedWindow:
			ws, _ := window(op, now)
			counter(s, windowKey{op.Key, ws}, windowKey{op.Key, windowBefore(op, ws)}, true)
		case descriptors.SlidingWindow:
			ws, _ := window(op, now)
			prev := windowBefore(op, ws)
			counter(s, windowKey{op.Key, ws}, windowKey{op.Key, windowBefore(op, prev)}, true)
			counter(s, windowKey{op.Key, prev}, windowKey{}, false)
		case descriptors.TokenBucket:
			bucket(s, op.Key)
		}
	}
}

// checkAtomicOps is checkOps plus one Now for all ops, and known vetoes.
func checkAtomicOps(ops []limiter.Op, results []limiter.Result) error {
	if err := checkOps(ops, results); err != nil {
		return err
	}
	for i := range ops {
		if ops[i].Now != ops[0].Now {
			return fmt.Errorf("%w: op %d: now %d differs from op 0's %d; an all-or-nothing call has one time",
				ErrInvalidOp, i, ops[i].Now, ops[0].Now)
		}
		if ops[i].Veto > limiter.VetoGroup {
			return fmt.Errorf("%w: op %d: unknown veto %d", ErrInvalidOp, i, ops[i].Veto)
		}
	}
	return nil
}
