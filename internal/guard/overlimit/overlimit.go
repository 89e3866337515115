// Package overlimit keeps a local cache of the keys a limiter.Store has
// found over their limit, and denies their ops itself until the store's own
// retry_after has run out, sparing the store the round trips of clients
// that keep knocking.
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

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

const (
	// shards is the number of independently locked parts of a Cache.
	shards = 32
	// maxRetry caps a remembered retry_after (2^40 ms, about 35 years), so
	// that until, in ns, stays far from overflowing.
	maxRetry = 1 << 40
	// maxPooled is the largest batch buffer kept for reuse.
	maxPooled = 1024
)

// Options configure a Cache.
type Options struct {
	// MaxEntries bounds the number of keys held. Zero or less holds none:
	// the Cache then passes every call through, and the caller may as well
	// not wrap the store at all.
	MaxEntries int
	// Clock is the time source, time.Now by default. Durations are measured
	// on its monotonic reading when it has one (time.Now's has), so a step
	// of the wall clock neither stretches nor shortens a denial.
	Clock func() time.Time
}

// Stats are a Cache's counters, for metrics.
type Stats struct {
	// Hits counts the ops the Cache denied itself since New.
	Hits uint64
	// Full counts the denials not remembered because the Cache held
	// MaxEntries keys and none had expired in the key's shard.
	Full uint64
	// Entries is the number of keys held, counting expired ones that have
	// not been dropped yet.
	Entries int
}

// Cache is a limiter.Store that remembers the keys its store has found
// over their limit and denies their ops itself until the store said they
// could pass. It only ever denies: every op a Cache allows, its store
// allowed. It is safe for concurrent use.
//
// What it remembers: when the store denies an op that has a cost, a
// retry_after and no explicit Now, the op's key, its decision parameters
// (Algorithm, Limit, Window, Burst, RateNum, RateDen), its Cost, and
// until = s + retry_after, where s is the Clock's reading taken before the
// call went to the store. The store decided at s or later, so its own
// retry_after runs out at until or later. until is shortened by 1 ms, for
// the store reads its clock in whole ms and so counts retry_after from up
// to 1 ms before the instant it decided, and by 1/1024 of retry_after, for
// the rates of this clock and the store's to differ (NTP slews a clock by
// at most 500 ppm).
//
// What it answers: an op with Cost > 0 (not a refund) and Now == 0,
// before until, whose
// key is held with the same decision parameters and a Cost no larger than
// the op's. It gets Allowed false, Remaining 0 and RetryAfter = Reset = the
// time left until until, in ms rounded up. Every other op goes to the
// store: peeks, ops with explicit times, ops under a different limit (a
// request's limit override), ops with a smaller cost. The ops of one call
// that the Cache does not answer go to the store in one Take, so a call
// costs at most the one round trip it cost without the Cache.
//
// Every op with a cost that goes to the store replaces what the Cache held
// for its key by the store's answer: a new entry for a denial, none for an
// allowance (or a denial with an explicit Now). An allowed peek of a window
// drops the key too. See covers for why a held denial cannot be wrong
// while the store keeps its state: a store that loses state (a failover
// that drops writes, eviction under maxmemory, a step of its clock) may
// admit sooner than its retry_after said, and the Cache denies until then.
type Cache struct {
	store limiter.Store
	clock func() time.Time
	base  time.Time // times are ns since base
	seed  maphash.Seed
	max   int64 // MaxEntries

	size atomic.Int64 // entries held, across shards
	hits atomic.Uint64
	full atomic.Uint64

	shards [shards]shard
}

var (
	_ limiter.Store       = (*Cache)(nil)
	_ limiter.AtomicStore = (*Cache)(nil)
)

// shard holds the entries of the keys that hash to it.
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

// New wraps store. It starts no goroutines: expired entries are dropped
// when they are next looked up, or when the Cache is full and a new key
// lands in their shard.
func New(store limiter.Store, opts Options) *Cache {
	c := &Cache{store: store, clock: opts.Clock, seed: maphash.MakeSeed(), max: int64(max(opts.MaxEntries, 0))}
	if c.clock == nil {
		c.clock = time.Now
	}
	c.base = c.clock()
	for i := range c.shards {
		c.shards[i].m = make(map[string]entry)
		c.shards[i].minUntil = math.MaxInt64
	}
	return c
}

// now returns the Clock's reading in ns since base.
func (c *Cache) now() int64 { return int64(c.clock().Sub(c.base)) }

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

// Take denies the ops it holds a covering entry for and sends the others
// to the store in one Take, as described on Cache. The store's errors are
// returned unchanged; after one, no result may be used.
func (c *Cache) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if c.max == 0 || len(ops) == 0 || len(results) < len(ops) {
		return c.store.Take(ctx, ops, results) // it reports short results
	}
	sent := c.now()
	var b *batch
	hits := 0
	if c.size.Load() > 0 {
		for i := range ops {
			if !c.deny(&ops[i], sent, &results[i]) {
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

// deny answers op from the cache if an entry covers it at now.
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

// covers reports whether e's denial holds for op until e.until.
//
// The store's retry_after is the exact wait after which the same op could
// first pass if nothing else happened: lua/*.lua derive it so, and
// limitertest's RetryAfter checks it to the millisecond on every store.
// What else can happen only delays that, as long as the key's state changes
// through ops with e's parameters alone: they only add charges. And each
// algorithm's decision is monotone in the cost, so an op that costs more
// than a denied one is denied too:
//
//   - Fixed window: retry_after is the time left in the window. The denied
//     hit was counted, so count > limit; the count only grows until the
//     counter expires at the window's end; count + cost <= limit fails
//     for any cost > 0 until then.
//   - Sliding window: allowed is cur + share(prev, rem) + cost <= limit. A
//     cost above the limit never passes (retry_after is then the window).
//     Otherwise retry_after is the first ms at which the weighted count
//     has decayed enough for cost: within this window, once rem (which
//     only falls with time) reaches maxrem(prev, limit-cost-cur); or, when
//     cur alone is over limit-cost, into the next window, where this one's
//     count is prev. Charges only raise cur and prev, and a larger cost
//     needs a smaller rem, so neither can pass sooner.
//   - Token bucket: retry_after = ceil(((cost-t)*den - c)/num) is the first
//     ms at which the refill brings t to cost; the refill is exact (the
//     carry c keeps every fraction), charges only lower t, and a larger
//     cost needs a larger t. A cost above the burst never passes
//     (retry_after is then the window).
//
// So all three algorithms are cached. The ops the Cache denies never reach
// the store. A sliding window's denial writes nothing, and a token bucket's
// writes only its refill, which the next op computes identically: the
// store ends as it would have. A fixed window would have counted them. Ops
// under the same limit decide the same either way, the count being over the
// limit already, but an op under a higher limit on the same key in the same
// window (an override) sees a lower count than it would have without the
// Cache, as with the reference server's cache.
//
// Ops on one key with another algorithm, window or bucket (overrides share
// keys) can rewrite its expiry or refill in the store, so that the store's
// own retry_after was not exact. The Cache replaces or drops a key's entry
// whenever it sends the store such an op, but it cannot see other servers'
// ops.
func (e *entry) covers(op *limiter.Op) bool {
	return op.Algorithm == e.alg && op.Limit == e.limit && op.Window == e.window &&
		op.Burst == e.burst && op.RateNum == e.num && op.RateDen == e.den && op.Cost >= e.minCost
}

// learn updates the entries of the keys of ops that the store decided at
// sent or later.
func (c *Cache) learn(ops []limiter.Op, results []limiter.Result, sent int64) {
	for i := range ops {
		op, r := &ops[i], &results[i]
		switch {
		case op.Cost > 0 && !r.Allowed && op.Now == 0 && r.RetryAfter > 0:
			c.put(op, r.RetryAfter, sent)
		case op.Cost > 0 || (r.Allowed && op.Algorithm != descriptors.TokenBucket):
			// A token bucket's peek is always allowed and says nothing.
			c.forget(op.Key)
		}
	}
}

// put remembers op's denial. When the Cache is full, it first drops the
// expired entries of the key's shard; if that frees nothing, the denial is
// not remembered.
func (c *Cache) put(op *limiter.Op, retry, sent int64) {
	retry = min(retry, maxRetry)
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

// forget drops key's entry, if any.
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

// Ping forwards to the store.
func (c *Cache) Ping(ctx context.Context) error { return c.store.Ping(ctx) }

// Close closes the store.
func (c *Cache) Close() error { return c.store.Close() }

// TakeAll passes an all-or-nothing call straight to the store, which must
// be a limiter.AtomicStore. Such calls are neither answered nor learned
// from: their keys (limiter.AppendAtomicKey) never meet the keys of Take.
func (c *Cache) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	all, ok := c.store.(limiter.AtomicStore)
	if !ok {
		return fmt.Errorf("overlimit: %T: %w", c.store, limiter.ErrNotAtomic)
	}
	return all.TakeAll(ctx, ops, results)
}
