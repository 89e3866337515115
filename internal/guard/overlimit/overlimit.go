// Package overlimit caches the keys a limiter.Store found over their limit
// and denies their ops itself until the store's retry_after has run out.
package overlimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/pkg/clock"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

const (
	shards    = 32
	maxRetry  = 1 << 40 // ms (35 years): until, in ns, cannot overflow
	maxPooled = 1024    // the largest batch buffer kept for reuse
)

// Options configure a Cache.
type Options struct {
	// Bytes is the memory the Cache may hold, counted as EntryBytes a
	// key; under one entry's worth it holds none, and every call passes
	// through.
	Bytes int
	// Clock is the time source (default: the wall clock), read as
	// monotonic time.
	Clock Clock
}

// EntryBytes is what Options.Bytes counts a key: an entry's heap and its
// key's, with room for long keys and map growth (docs/redis.md has the
// measure).
const EntryBytes = 256

// Clock tells a Cache the time.
type Clock interface {
	Now() time.Time
}

// Stats are a Cache's counters, for metrics.
type Stats struct {
	Hits    uint64 // ops the Cache denied itself
	Full    uint64 // denials not remembered: Bytes held, none expired in the key's shard
	Entries int    // keys held, expired ones not yet dropped included
}

// Cache is a limiter.Store that remembers its store's denials and answers
// later ops on those keys itself. It only ever denies: every op it allows,
// its store allowed. It is safe for concurrent use.
//
// A denial is held until just before its retry_after ends, and answers the
// ops with a cost, no Refund, no Now, no joint and no Debit (charged even
// when denied: the store must see it) under the same parameters and a
// cost at least the denied one's. Other ops go to the store in one Take
// per call. docs/design.md#over-limit-cache says why this is safe.
type Cache struct {
	store limiter.Store
	clock Clock
	base  time.Time // times are ns since base
	seed  maphash.Seed
	max   int64 // entries: Bytes / EntryBytes

	size atomic.Int64 // entries held, across shards
	hits atomic.Uint64
	full atomic.Uint64

	shards [shards]shard
}

var (
	_ limiter.Store             = (*Cache)(nil)
	_ limiter.AllOrNothingStore = (*Cache)(nil)
)

type shard struct {
	mu       sync.Mutex
	m        map[string]entry
	n        atomic.Int64 // len(m), readable without mu
	minUntil int64        // at or below every held entry's until
	_        [32]byte     // keep shards on separate cache lines
}

// entry is a remembered denial.
type entry struct {
	until                                   int64 // ns since Cache.base
	limit, window, burst, num, den, minCost int64
	alg                                     descriptors.Algorithm
}

// New wraps store. It starts no goroutines: expired entries are dropped on
// lookup, or when the Cache is full and a new key needs room in their shard.
func New(store limiter.Store, opts Options) *Cache {
	c := &Cache{store: store, clock: opts.Clock, seed: maphash.MakeSeed(), max: int64(max(opts.Bytes/EntryBytes, 0))}
	if c.clock == nil {
		c.clock = clock.Wall{}
	}
	c.base = c.clock.Now()
	for i := range c.shards {
		c.shards[i].m = make(map[string]entry)
		c.shards[i].minUntil = math.MaxInt64
	}
	return c
}

func (c *Cache) now() int64 { return int64(c.clock.Now().Sub(c.base)) }

func (c *Cache) shard(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)%shards]
}

// batch is the scratch space of a call that the Cache partly answered.
type batch struct {
	ops []limiter.Op
	res []limiter.Result
	idx []int // idx[k] is the caller's index of ops[k]
}

var batches = sync.Pool{New: func() any { return new(batch) }}

func (b *batch) add(i int, op *limiter.Op) {
	b.ops = append(b.ops, *op)
	b.idx = append(b.idx, i)
}

func (b *batch) release() {
	if cap(b.ops) > maxPooled {
		return
	}
	clear(b.ops) // drop the keys
	b.ops, b.res, b.idx = b.ops[:0], b.res[:0], b.idx[:0]
	batches.Put(b)
}

// Take denies the ops a held entry covers and sends the others to the
// store in one Take. The store's errors are returned unchanged; after one,
// no result may be used.
func (c *Cache) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if c.max == 0 || len(ops) == 0 || len(results) < len(ops) {
		return c.store.Take(ctx, ops, results) // it reports short results
	}
	sent := c.now()
	var b *batch
	hits := 0
	if c.size.Load() > 0 {
		for i := range ops {
			if inJoint(ops, i) || ops[i].Debit || !c.deny(&ops[i], sent, &results[i]) {
				if b != nil {
					b.add(i, &ops[i])
				}
				continue
			}
			hits++
			if b == nil {
				b = batches.Get().(*batch)
				for j := range i {
					b.add(j, &ops[j])
				}
			}
		}
	}
	if b == nil {
		if err := c.store.Take(ctx, ops, results); err != nil {
			return err
		}
		c.learn(ops, results, sent)
		return nil
	}
	defer b.release()
	if len(b.ops) == 0 {
		c.hits.Add(uint64(hits))
		return nil
	}
	b.res = slices.Grow(b.res[:0], len(b.ops))[:len(b.ops)]
	if err := c.store.Take(ctx, b.ops, b.res); err != nil {
		return err
	}
	for k, i := range b.idx {
		results[i] = b.res[k]
	}
	c.hits.Add(uint64(hits))
	c.learn(b.ops, b.res, sent)
	return nil
}

func (c *Cache) deny(op *limiter.Op, now int64, r *limiter.Result) bool {
	if op.Cost <= 0 || op.Refund || op.Now != 0 {
		return false
	}
	s := c.shard(op.Key)
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	e, ok := s.m[op.Key]
	if ok && now >= e.until {
		c.remove(s, op.Key)
		ok = false
	}
	s.mu.Unlock()
	if !ok || !e.covers(op) {
		return false
	}
	wait := (e.until - now + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	*r = limiter.Result{RetryAfter: wait, Reset: wait}
	return true
}

// covers reports whether e's denial holds for op until e.until
// (docs/design.md#over-limit-cache).
func (e *entry) covers(op *limiter.Op) bool {
	return op.Algorithm == e.alg && op.Limit == e.limit && op.Window == e.window &&
		op.Burst == e.burst && op.RateNum == e.num && op.RateDen == e.den && op.Cost >= e.minCost
}

// inJoint reports whether ops[i] is decided with others (limiter.Op.Joined):
// the Cache answers none of them, as it cannot know the others' answers.
func inJoint(ops []limiter.Op, i int) bool {
	return ops[i].Joined || i+1 < len(ops) && ops[i+1].Joined
}

// learn records the store's answers to ops, sent at sent.
func (c *Cache) learn(ops []limiter.Op, results []limiter.Result, sent int64) {
	for i := range ops {
		op, r := &ops[i], &results[i]
		switch {
		case op.Cost > 0 && !r.Allowed && op.Now == 0 && r.RetryAfter > 0 && !inJoint(ops, i) && !op.Debit:
			c.put(op, r.RetryAfter, sent)
		case op.Cost > 0 || (r.Allowed && op.Algorithm != descriptors.TokenBucket):
			// A token bucket's peek is always allowed and says nothing.
			c.forget(op.Key)
		}
	}
}

// put remembers op's denial; a full Cache first sweeps the key's shard,
// and if that frees nothing, the denial is not remembered.
func (c *Cache) put(op *limiter.Op, retry, sent int64) {
	retry = min(retry, maxRetry)
	// Less 1 ms (the store's clock is in whole ms) and 1/1024 (clock rates).
	hold := retry - 1 - retry>>10
	if c.max == 0 || hold <= 0 {
		return
	}
	until := sent + hold*int64(time.Millisecond)
	e := entry{until: until, alg: op.Algorithm, limit: op.Limit, window: op.Window,
		burst: op.Burst, num: op.RateNum, den: op.RateDen, minCost: op.Cost}
	s := c.shard(op.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[op.Key]; !ok {
		ok := c.reserve()
		if !ok && sent >= s.minUntil {
			c.sweep(s, sent)
			ok = c.reserve()
		}
		if !ok {
			c.full.Add(1)
			return
		}
		s.n.Add(1)
	}
	s.m[op.Key] = e
	s.minUntil = min(s.minUntil, until)
}

// reserve counts one more entry, unless the Cache is full.
func (c *Cache) reserve() bool {
	for {
		n := c.size.Load()
		if n >= c.max {
			return false
		}
		if c.size.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (c *Cache) forget(key string) {
	if c.size.Load() == 0 {
		return
	}
	s := c.shard(key)
	if s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	if _, ok := s.m[key]; ok {
		c.remove(s, key)
	}
	s.mu.Unlock()
}

// remove deletes key, which s holds. s.mu must be held.
func (c *Cache) remove(s *shard, key string) {
	delete(s.m, key)
	s.n.Add(-1)
	c.size.Add(-1)
}

// sweep drops the entries of s that have expired by now. s.mu must be held.
func (c *Cache) sweep(s *shard, now int64) {
	s.minUntil = math.MaxInt64
	for k, e := range s.m {
		if now >= e.until {
			c.remove(s, k)
			continue
		}
		s.minUntil = min(s.minUntil, e.until)
	}
}

// Stats returns the Cache's counters.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Full: c.full.Load(), Entries: int(c.size.Load())}
}

// Ping pings the store.
func (c *Cache) Ping(ctx context.Context) error { return c.store.Ping(ctx) }

// Close closes the store.
func (c *Cache) Close() error { return c.store.Close() }

// TakeAll passes an all-or-nothing call straight to the store, which must
// be a limiter.AllOrNothingStore; such keys never meet those of Take.
func (c *Cache) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	all, ok := c.store.(limiter.AllOrNothingStore)
	if !ok {
		return fmt.Errorf("overlimit: %T: %w", c.store, limiter.ErrNotAllOrNothing)
	}
	return all.TakeAll(ctx, ops, results)
}
