package store

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// memShards is the number of independently locked parts of a Memory.
const memShards = 64

// DefaultSweepInterval is how often an open Memory removes expired state
// when MemoryOptions.SweepInterval is zero.
const DefaultSweepInterval = time.Minute

var _ limiter.Store = (*Memory)(nil)

// MemoryOptions configures a Memory.
type MemoryOptions struct {
	// Now is the clock of ops with Now 0 and of sweeps (default time.Now).
	Now func() time.Time
	// SweepInterval is the janitor's (default DefaultSweepInterval).
	SweepInterval time.Duration
	// MaxKeys bounds the entries held (see Memory); 0 means no bound.
	MaxKeys int
}

// Memory is a limiter.Store and limiter.AtomicStore in process, for one
// server or for tests, with the Lua scripts' integer arithmetic: it decides
// exactly as Redis would. It is safe for concurrent use.
//
// Expired state goes when next touched and by the janitor Open starts;
// without Open, Sweep removes it. With MaxKeys, a full store refuses a call
// that would add an entry (after a sweep, at most once a second) with
// ErrFull and limiter.ErrUnavailable, deciding nothing; live counters are
// never evicted (docs/design.md, "The memory store").
type Memory struct {
	now   func() time.Time
	every time.Duration
	seed  maphash.Seed
	max   int64

	keys    atomic.Int64 // entries held
	refused atomic.Int64 // calls refused because the store was full
	sweepMu sync.Mutex   // serialises the sweeps of a full store
	swept   time.Time    // last sweep of a full store, by the store's clock

	shards [memShards]memShard

	mu     sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// memShard holds the state of the base keys that hash to it.
type memShard struct {
	mu      sync.Mutex
	windows map[windowKey]counter
	buckets map[string]bucket
	keys    *atomic.Int64 // the Memory's entries; nil for TakeAll's scratch
	max     int64         // the Memory's MaxKeys
	_       [24]byte      // one cache line a shard
}

// windowKey names a window counter: the Redis key is base + start/1000.
type windowKey struct {
	base  string
	start int64 // window start, Unix ms
}

type counter struct {
	n, expireAt int64
}

// bucket is a token bucket's state, as take.lua packs it.
type bucket struct {
	t, ts, c, expireAt int64
}

// NewMemory returns an empty Memory; it starts no goroutine.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{now: opts.Now, every: opts.SweepInterval, seed: maphash.MakeSeed(), max: int64(max(opts.MaxKeys, 0))}
	if m.now == nil {
		m.now = time.Now
	}
	if m.every <= 0 {
		m.every = DefaultSweepInterval
	}
	for i := range m.shards {
		m.shards[i].windows = make(map[windowKey]counter)
		m.shards[i].buckets = make(map[string]bucket)
		m.shards[i].keys, m.shards[i].max = &m.keys, m.max
	}
	return m
}

// Open starts the janitor, which sweeps every SweepInterval until ctx ends
// or Close. Opening an open Memory is an error.
func (m *Memory) Open(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel != nil {
		return errors.New("memory store is already open")
	}
	ctx, m.cancel = context.WithCancel(ctx)
	m.done = make(chan struct{})
	go m.janitor(ctx, m.done)
	return nil
}

func (m *Memory) janitor(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.Sweep()
		}
	}
}

// Close stops the janitor and waits for it; Take still works. It is idempotent.
func (m *Memory) Close() error {
	m.mu.Lock()
	cancel, done := m.cancel, m.done
	m.cancel, m.done = nil, nil
	m.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// Ping always succeeds.
func (m *Memory) Ping(context.Context) error { return nil }

// Sweep removes expired state and returns how many entries it removed.
func (m *Memory) Sweep() int {
	now := m.now().UnixMilli()
	removed := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n := 0
		for k, c := range s.windows {
			if c.expireAt <= now {
				delete(s.windows, k)
				n++
			}
		}
		for k, b := range s.buckets {
			if b.expireAt <= now {
				delete(s.buckets, k)
				n++
			}
		}
		s.grew(-int64(n))
		s.mu.Unlock()
		removed += n
	}
	return removed
}

// Len returns the entries held, expired or not: counters plus buckets.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.windows) + len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

// Take decides ops in order, as limiter.Store says. It fails, deciding
// nothing, when ctx is done or the store full (limiter.ErrUnavailable) or
// an op is invalid (ErrInvalidOp).
func (m *Memory) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory take: %w: %w", limiter.ErrUnavailable, err)
	}
	if err := checkOps(ops, results); err != nil {
		return err
	}
	if err := m.room(ops); err != nil {
		return fmt.Errorf("memory take: %w", err)
	}
	if hasJoint(ops) {
		m.takeJoints(ops, results)
		return nil
	}
	m.take(ops, results)
	return nil
}

// take decides ops one by one, joints aside.
func (m *Memory) take(ops []limiter.Op, results []limiter.Result) {
	var clock int64 // the store's time, for ops that carry their own
	for i := range ops {
		op := &ops[i]
		now, at := op.Now, int64(0)
		if now == 0 {
			now = m.now().UnixMilli()
			at = now
		} else {
			if clock == 0 {
				clock = m.now().UnixMilli()
			}
			at = clock
		}
		s := &m.shards[maphash.String(m.seed, op.Key)%memShards]
		s.mu.Lock()
		results[i] = s.decide(op, now, at)
		s.mu.Unlock()
	}
}

// decide decides op on s at now, the store's time being at, as take.lua
// does: each algorithm reads its state, decides with the scripts'
// arithmetic (arith.go) and writes what changed.
func (s *memShard) decide(op *limiter.Op, now, at int64) limiter.Result {
	switch op.Algorithm {
	case descriptors.FixedWindow:
		return s.fixedWindow(op, now, at)
	case descriptors.SlidingWindow:
		return s.slidingWindow(op, now, at)
	}
	return s.tokenBucket(op, now)
}

// count returns the counter k at now, 0 if it is missing or expired.
func (s *memShard) count(k windowKey, now int64) int64 {
	c, _ := s.window(k, now)
	return c.n
}

// window returns the counter k at now; an expired one is dropped, missing.
func (s *memShard) window(k windowKey, now int64) (counter, bool) {
	c, ok := s.windows[k]
	if !ok {
		return counter{}, false
	}
	if c.expireAt <= now {
		s.dropWindow(k)
		return counter{}, false
	}
	return c, true
}

// fixedWindow mirrors take.lua's fixed_window: the count, charged
// (saturating at 2^52) whether it fits or not, or given back; the window
// before is dropped if expired by the store's clock at, as Sweep would.
func (s *memShard) fixedWindow(op *limiter.Op, now, at int64) limiter.Result {
	cost := scriptCost(op)
	ws, we := window(op, now)
	k := windowKey{op.Key, ws}

	count := s.count(k, now)
	switch {
	case cost < 0:
		count = s.refund(k, count, -cost)
	case cost > 0:
		count = min(count+cost, maxCost)
		if s.putWindow(k, counter{n: count, expireAt: we}) {
			s.dropEnded(windowKey{op.Key, windowBefore(op, ws)}, at)
		}
	}
	return fixedResult(op, count, now) // as Redis' answer is derived
}

// slidingWindow mirrors take.lua's sliding_window: this window's count and
// the previous one's (capped at the limit, unless a debit), weighed; a
// charge is counted when it fits (a debit's always), a refund given back
// to this window. at is as for fixedWindow.
func (s *memShard) slidingWindow(op *limiter.Op, now, at int64) limiter.Result {
	limit, cost := op.Limit, scriptCost(op)
	ws, we := window(op, now)
	prevStart := windowBefore(op, ws)
	curKey, prevKey := windowKey{op.Key, ws}, windowKey{op.Key, prevStart}
	cur := s.count(curKey, now)
	prevC, hasPrev := s.window(prevKey, now)
	prev := prevC.n
	if !op.Debit {
		prev = min(prev, limit)
	}
	g, wg := windowSteps(we - ws)
	gn, wgn := g, wg // the next window's
	next := windowAfter(op, we)
	if op.Calendar != nil {
		gn, wgn = windowSteps(next - we)
	}

	if cost < 0 { // a refund: this window's count drops, not below 0
		cur = s.refund(curKey, cur, -cost)
		return slidingResult(op, slidingWeigh(g, wg, now-ws, cur, prev), 0, now)
	}
	w, retry, allowed := slidingDecide(limit, we-ws, g, wg, cost, now-ws, cur, prev, op.Debit, gn, wgn)
	if cost > 0 && (allowed || op.Debit) {
		if s.putWindow(curKey, counter{n: min(cur+cost, maxCost), expireAt: next}) {
			s.dropEnded(windowKey{op.Key, windowBefore(op, prevStart)}, at)
		}
		if hasPrev { // so that both counters share curKey's key string
			s.windows[prevKey] = prevC
		}
	}
	return slidingResult(op, w, retry, now)
}

// refund gives cost back to counter k, holding count, keeping its expiry;
// emptied, it is dropped. It returns the count after.
func (s *memShard) refund(k windowKey, count, cost int64) int64 {
	if count == 0 || cost == 0 {
		return count
	}
	if count <= cost {
		s.dropWindow(k)
		return 0
	}
	c := s.windows[k]
	c.n = count - cost
	s.windows[k] = c
	return c.n
}

// tokenBucket mirrors take.lua's token_bucket: the state refilled to now,
// charged if its tokens allow (a refund always, a debit below zero if
// they do not), written unless a peek; a full bucket is deleted.
func (s *memShard) tokenBucket(op *limiter.Op, now int64) limiter.Result {
	burst, num, den, cost := op.Burst, op.RateNum, op.RateDen, scriptCost(op)
	t, ts, c := burst, now, int64(0)
	if b, ok := s.buckets[op.Key]; ok {
		if b.expireAt > now {
			t, ts, c = b.t, b.ts, b.c
		} else {
			s.dropBucket(op.Key)
		}
	}

	allowed, t, ts, c := bucketDecide(burst, num, den, cost, now, t, ts, c, op.Debit)
	if cost != 0 { // a charge or a refund leaves its state; a peek changes nothing
		if t >= burst {
			s.dropBucket(op.Key)
		} else {
			s.putBucket(op.Key, bucket{t: t, ts: ts, c: c, expireAt: bucketExpiry(burst, num, den, t, c, ts)})
		}
	}
	return bucketAnswer(op, allowed, t, c) // as Redis' answer is derived
}
