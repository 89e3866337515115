package overlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/guard/overlimit"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

const milli = descriptors.Milli

// start is the clocks' origin: a whole day since the epoch, so that every
// window starts at a whole second from it.
var start = time.Unix(1_800_000_000-1_800_000_000%86_400, 0)

func newClock() *clock.Clock { return clock.New(start) }

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// deny is a denial with retry_after and reset retry, as the Cache gives.
func deny(retry int64) *limiter.Result { return &limiter.Result{RetryAfter: retry, Reset: retry} }

func allow(remaining int64) *limiter.Result {
	return &limiter.Result{Allowed: true, Remaining: remaining}
}

// fake is a scripted store: it records the ops that reach it and answers
// them with next, or fails with err.
type fake struct {
	mu    sync.Mutex
	calls int
	seen  []limiter.Op
	next  func(op limiter.Op) limiter.Result
	err   error
}

func (f *fake) Take(_ context.Context, ops []limiter.Op, res []limiter.Result) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.seen = append(f.seen, ops...)
	if f.err != nil {
		return f.err
	}
	for i := range ops {
		res[i] = f.next(ops[i])
	}
	return nil
}

func (f *fake) Ping(context.Context) error { return f.err }
func (f *fake) Close() error               { return f.err }

// reset forgets the ops seen so far.
func (f *fake) reset() (calls int, seen []limiter.Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls, seen = f.calls, f.seen
	f.calls, f.seen = 0, nil
	return calls, seen
}

// atomicFake is a fake that is also a limiter.AtomicStore.
type atomicFake struct {
	fake
	all int
}

func (f *atomicFake) TakeAll(ctx context.Context, ops []limiter.Op, res []limiter.Result) error {
	f.all++
	return f.fake.Take(ctx, ops, res)
}

var (
	fixed   = limiter.Op{Key: "k", Algorithm: descriptors.FixedWindow, Limit: 2 * milli, Window: 1000, Cost: milli, Burst: 2 * milli}
	sliding = limiter.Op{Key: "k", Algorithm: descriptors.SlidingWindow, Limit: 2 * milli, Window: 1000, Cost: milli, Burst: 2 * milli}
	bucket  = limiter.Op{Key: "k", Algorithm: descriptors.TokenBucket, Limit: 2 * milli, Window: 1000, Cost: milli, Burst: 2 * milli, RateNum: 2, RateDen: 1}
)

// with returns op changed by f.
func with(op limiter.Op, f func(*limiter.Op)) limiter.Op {
	f(&op)
	return op
}

func cost(c int64) func(*limiter.Op) { return func(op *limiter.Op) { op.Cost = c } }

// step sends op at the clock reading at. The store answers with store if
// the op reaches it; a nil store means that the Cache must answer, denied
// with RetryAfter and Reset retry.
type step struct {
	at    time.Duration
	op    limiter.Op
	store *limiter.Result
	retry int64
}

func TestTake(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"denial held until retry_after less 1 ms", []step{
			{at: 0, op: fixed, store: deny(300)},
			{at: ms(100), op: fixed, retry: 199},
			{at: ms(298), op: fixed, retry: 1},
			{at: ms(299), op: fixed, store: allow(1000)},
			{at: ms(300), op: fixed, store: allow(0)},
		}},
		{"wait rounded up to the ms", []step{
			{at: ms(10), op: fixed, store: deny(300)},
			{at: ms(110) + 500*time.Microsecond, op: fixed, retry: 199},
			{at: ms(308) + time.Microsecond, op: fixed, retry: 1},
			{at: ms(309), op: fixed, store: deny(691)},
		}},
		{"long retry_after shortened by 1/1024", []step{
			{at: 0, op: fixed, store: deny(10240)},
			{at: ms(10228), op: fixed, retry: 1},
			{at: ms(10229), op: fixed, store: allow(0)},
		}},
		{"every algorithm", []step{
			{at: 0, op: sliding, store: deny(300)},
			{at: ms(1), op: sliding, retry: 298},
			{at: ms(2), op: with(sliding, func(op *limiter.Op) { op.Key = "b" }), store: deny(500)},
			{at: ms(3), op: with(sliding, func(op *limiter.Op) { op.Key = "b" }), retry: 498},
			{at: ms(4), op: with(bucket, func(op *limiter.Op) { op.Key = "t" }), store: deny(500)},
			{at: ms(5), op: with(bucket, func(op *limiter.Op) { op.Key = "t" }), retry: 498},
		}},
		{"override bypasses", []step{
			{at: 0, op: fixed, store: deny(500)},
			{at: ms(10), op: with(fixed, func(op *limiter.Op) { op.Limit, op.Burst = 5*milli, 5*milli }), store: allow(2000)},
		}},
		{"larger cost hits, smaller cost bypasses", []step{
			{at: 0, op: fixed, store: deny(500)},
			{at: ms(10), op: with(fixed, cost(2*milli)), retry: 489},
			{at: ms(20), op: with(fixed, cost(milli/2)), store: deny(100)},
			// The smaller cost's denial replaced the entry.
			{at: ms(30), op: fixed, retry: 89},
			{at: ms(40), op: with(fixed, cost(milli/2)), retry: 79},
		}},
		{"a refund goes to the store, and forgets", []step{
			{at: 0, op: fixed, store: deny(500)},
			{at: ms(10), op: with(fixed, func(op *limiter.Op) { op.Refund = true }), store: allow(1000)},
			{at: ms(20), op: fixed, store: allow(0)},
		}},
		{"peeks bypass and keep the entry when denied", []step{
			{at: 0, op: fixed, store: deny(500)},
			{at: ms(10), op: with(fixed, cost(0)), store: &limiter.Result{Reset: 490}},
			{at: ms(20), op: fixed, retry: 479},
		}},
		{"an allowed window peek forgets", []step{
			{at: 0, op: sliding, store: deny(500)},
			{at: ms(10), op: with(sliding, cost(0)), store: allow(1000)},
			{at: ms(20), op: sliding, store: allow(0)},
		}},
		{"a token bucket's peek does not forget", []step{
			{at: 0, op: bucket, store: deny(500)},
			{at: ms(10), op: with(bucket, cost(0)), store: allow(0)},
			{at: ms(20), op: bucket, retry: 479},
		}},
		{"an allowed answer forgets", []step{
			{at: 0, op: bucket, store: deny(500)},
			{at: ms(10), op: with(bucket, cost(milli/2)), store: allow(0)},
			{at: ms(20), op: bucket, store: deny(240)},
			{at: ms(30), op: bucket, retry: 229},
		}},
		{"explicit Now bypasses and forgets", []step{
			{at: 0, op: fixed, store: deny(500)},
			{at: ms(10), op: with(fixed, func(op *limiter.Op) { op.Now = 12345 }), store: deny(500)},
			{at: ms(20), op: fixed, store: deny(480)},
			{at: ms(30), op: fixed, retry: 469},
		}},
		{"denials without retry_after or cost are not held", []step{
			{at: 0, op: fixed, store: deny(0)},
			{at: ms(10), op: fixed, store: deny(1)},
			{at: ms(10), op: fixed, store: allow(0)},
			{at: ms(20), op: with(fixed, cost(0)), store: deny(300)},
			{at: ms(30), op: fixed, store: allow(0)},
		}},
	}
	for _, p := range []struct {
		name string
		f    func(*limiter.Op)
	}{
		{"algorithm", func(op *limiter.Op) { op.Algorithm = descriptors.SlidingWindow }},
		{"limit", func(op *limiter.Op) { op.Limit++ }},
		{"window", func(op *limiter.Op) { op.Window *= 2 }},
		{"burst", func(op *limiter.Op) { op.Burst++ }},
		{"rate numerator", func(op *limiter.Op) { op.RateNum++ }},
		{"rate denominator", func(op *limiter.Op) { op.RateDen++ }},
	} {
		tests = append(tests, struct {
			name  string
			steps []step
		}{"other " + p.name + " bypasses", []step{
			{at: 0, op: bucket, store: deny(500)},
			{at: ms(10), op: with(bucket, p.f), store: deny(400)},
		}})
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			f := &fake{}
			c := overlimit.New(f, overlimit.Options{MaxEntries: 100, Clock: clk})
			res := make([]limiter.Result, 1)
			for i, s := range tt.steps {
				clk.Advance(s.at - clk.Since(start))
				f.next = func(limiter.Op) limiter.Result {
					if s.store == nil {
						return limiter.Result{Allowed: true, Remaining: -1} // unexpected; reported below
					}
					return *s.store
				}
				if err := c.Take(context.Background(), []limiter.Op{s.op}, res); err != nil {
					t.Fatalf("step %d: Take = %v", i, err)
				}
				calls, _ := f.reset()
				switch {
				case s.store != nil && calls != 1:
					t.Fatalf("step %d at %v: answered %+v by the cache, want it sent to the store", i, s.at, res[0])
				case s.store != nil && res[0] != *s.store:
					t.Fatalf("step %d: result %+v, want the store's %+v", i, res[0], *s.store)
				case s.store == nil && calls != 0:
					t.Fatalf("step %d at %v: sent to the store, want the cache to deny it", i, s.at)
				case s.store == nil && res[0] != *deny(s.retry):
					t.Fatalf("step %d: result %+v, want %+v", i, res[0], *deny(s.retry))
				}
			}
		})
	}
}

// TestBatch: the ops the cache cannot answer go to the store in one call,
// in order, and their results land at their places.
func TestBatch(t *testing.T) {
	clk := newClock()
	f := &fake{next: func(op limiter.Op) limiter.Result {
		if op.Key == "a" || op.Key == "b" {
			return *deny(1000)
		}
		return *allow(op.Cost)
	}}
	c := overlimit.New(f, overlimit.Options{MaxEntries: 100, Clock: clk})
	key := func(op limiter.Op, k string) limiter.Op { op.Key = k; return op }
	ctx := context.Background()

	res := make([]limiter.Result, 2)
	if err := c.Take(ctx, []limiter.Op{key(fixed, "a"), key(bucket, "b")}, res); err != nil {
		t.Fatal(err)
	}
	f.reset()

	clk.Advance(ms(100))
	ops := []limiter.Op{key(fixed, "x"), key(fixed, "a"), with(key(fixed, "y"), cost(3)), key(bucket, "b"), key(bucket, "a"), with(key(fixed, "z"), cost(7))}
	res = make([]limiter.Result, len(ops))
	// In the first round "a" is held as a fixed window: ops[1] hits and
	// ops[4] goes to the store, whose denial replaces the entry. In the
	// second (which reuses the pooled buffers) it is the other way round.
	rounds := []struct {
		sent []int
		want []limiter.Result
	}{
		{[]int{0, 2, 4, 5}, []limiter.Result{*allow(milli), *deny(899), *allow(3), *deny(899), *deny(1000), *allow(7)}},
		{[]int{0, 1, 2, 5}, []limiter.Result{*allow(milli), *deny(1000), *allow(3), *deny(899), *deny(999), *allow(7)}},
	}
	for r, round := range rounds {
		if err := c.Take(ctx, ops, res); err != nil {
			t.Fatal(err)
		}
		var want []limiter.Op
		for _, i := range round.sent {
			want = append(want, ops[i])
		}
		if calls, seen := f.reset(); calls != 1 || !slices.Equal(seen, want) {
			t.Fatalf("round %d: store got %d calls with %v, want one with %v", r, calls, seen, want)
		}
		if !slices.Equal(res, round.want) {
			t.Fatalf("round %d: results %+v, want %+v", r, res, round.want)
		}
	}

	// A call the cache answers whole does not reach the store.
	clk.Advance(ms(1))
	if err := c.Take(ctx, []limiter.Op{key(bucket, "b"), key(bucket, "b")}, res); err != nil {
		t.Fatal(err)
	}
	if calls, _ := f.reset(); calls != 0 || res[0] != *deny(898) || res[1] != *deny(898) {
		t.Fatalf("all held: %d store calls, results %+v", calls, res[:2])
	}
	if s := c.Stats(); s.Hits != 6 || s.Entries != 2 {
		t.Fatalf("Stats = %+v, want 6 hits and 2 entries", s)
	}
}

// recorder records the ops that reach the store beneath.
type recorder struct {
	limiter.Store
	seen []limiter.Op
}

func (r *recorder) Take(ctx context.Context, ops []limiter.Op, res []limiter.Result) error {
	r.seen = append(r.seen, ops...)
	return r.Store.Take(ctx, ops, res)
}

// TestDifferential drives random histories through a Cache over a Memory
// store and, op for op, through a second Memory store alone, on one stepped
// clock. Every op the Cache denies, the store alone denies too, and
// says to wait no less; every op that reaches the store beneath gets the
// answer the store alone gives.
func TestDifferential(t *testing.T) {
	tests := []struct {
		op        limiter.Op
		overrides bool // also send ops under a higher limit (10 times)
	}{
		{limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 3 * milli, Window: 1000, Burst: 3 * milli}, true},
		{limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 5 * milli, Window: 2000, Burst: 5 * milli}, false},
		{limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 3 * milli, Window: 1000, Burst: 3 * milli}, true},
		{limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 5 * milli, Window: 2000, Burst: 5 * milli}, false},
		{limiter.Op{Algorithm: descriptors.TokenBucket, Limit: 3 * milli, Window: 1000, Burst: 3 * milli, RateNum: 3, RateDen: 1}, false},
		{limiter.Op{Algorithm: descriptors.TokenBucket, Limit: 5 * milli, Window: 3000, Burst: 2 * milli, RateNum: 5, RateDen: 3}, false},
	}
	costs := []int64{0, 500, 1000, 1000, 1000, 1500, 2500, 6000}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d/%d", tt.op.Algorithm, tt.op.Limit/milli, tt.op.Window), func(t *testing.T) {
			clk := newClock()
			// The stores' clock is ahead of the Cache's by a fraction of
			// a ms: only durations may matter.
			storeNow := func() time.Time { return clk.Now().Add(123_456_789 * time.Nanosecond) }
			under := &recorder{Store: store.NewMemory(store.MemoryOptions{Now: storeNow})}
			alone := store.NewMemory(store.MemoryOptions{Now: storeNow})
			c := overlimit.New(under, overlimit.Options{MaxEntries: 64, Clock: clk})
			rng := rand.New(rand.NewPCG(1, uint64(tt.op.Algorithm)<<32|uint64(tt.op.Window)))
			ctx := context.Background()

			total, local := 0, 0
			for range 3000 {
				clk.Advance(time.Duration(rng.Int64N(150_000)) * time.Microsecond)
				ops := make([]limiter.Op, 1+rng.IntN(3))
				for i := range ops {
					op := tt.op
					op.Key = []string{"a", "b"}[rng.IntN(2)]
					op.Cost = costs[rng.IntN(len(costs))]
					if tt.overrides && rng.IntN(10) == 0 {
						op.Limit, op.Burst = 10*op.Limit, 10*op.Burst
					}
					ops[i] = op
				}
				got := make([]limiter.Result, len(ops))
				want := make([]limiter.Result, len(ops))
				under.seen = under.seen[:0]
				if err := c.Take(ctx, ops, got); err != nil {
					t.Fatal(err)
				}
				if err := alone.Take(ctx, ops, want); err != nil {
					t.Fatal(err)
				}
				sent := 0
				for i, op := range ops {
					total++
					at := fmt.Sprintf("at %v, op %+v", clk.Since(start), op)
					if sent < len(under.seen) && under.seen[sent] == op {
						sent++
						// A fixed window under an override can see fewer
						// hits than alone: see covers.
						if got[i] != want[i] && !(op.Algorithm == descriptors.FixedWindow && op.Limit != tt.op.Limit) {
							t.Fatalf("%s: through the cache %+v, alone %+v", at, got[i], want[i])
						}
						continue
					}
					local++
					if got[i].Allowed || got[i].Remaining != 0 || got[i].RetryAfter < 1 || got[i].Reset != got[i].RetryAfter {
						t.Fatalf("%s: the cache answered %+v", at, got[i])
					}
					if want[i].Allowed {
						t.Fatalf("%s: the cache denied what the store allows: %+v", at, want[i])
					}
					if !never(op) && got[i].RetryAfter > want[i].RetryAfter {
						t.Fatalf("%s: the cache says retry after %d ms, the store %d ms", at, got[i].RetryAfter, want[i].RetryAfter)
					}
				}
				if sent != len(under.seen) {
					t.Fatalf("the store got %v, not a subsequence of %v", under.seen, ops)
				}
			}
			t.Logf("%d of %d ops answered by the cache", local, total)
			if local < total/10 {
				t.Errorf("the cache answered %d of %d ops, want at least a tenth", local, total)
			}
		})
	}
}

// never reports whether op's cost exceeds its limit or bucket, so that it
// can never pass (its retry_after is then conventional).
func never(op limiter.Op) bool {
	if op.Algorithm == descriptors.TokenBucket {
		return op.Cost > op.Burst
	}
	return op.Cost > op.Limit
}

func TestMaxEntries(t *testing.T) {
	ctx := context.Background()
	key := func(round, i int) limiter.Op {
		op := fixed
		op.Key = fmt.Sprintf("k%d-%d", round, i)
		return op
	}
	t.Run("bounded", func(t *testing.T) {
		const maxEntries, keys = 40, 1000
		clk := newClock()
		f := &fake{next: func(limiter.Op) limiter.Result { return *deny(1000) }}
		c := overlimit.New(f, overlimit.Options{MaxEntries: maxEntries, Clock: clk})
		res := make([]limiter.Result, 1)
		for round := range 2 {
			for i := range keys {
				if err := c.Take(ctx, []limiter.Op{key(round, i)}, res); err != nil {
					t.Fatal(err)
				}
				if s := c.Stats(); s.Entries > maxEntries {
					t.Fatalf("round %d, key %d: %d entries, want at most %d", round, i, s.Entries, maxEntries)
				}
			}
			f.reset()
			// The keys held are answered here; the rest go on.
			for i := range keys {
				if err := c.Take(ctx, []limiter.Op{key(round, i)}, res); err != nil {
					t.Fatal(err)
				}
			}
			calls, _ := f.reset()
			s := c.Stats()
			if held := keys - calls; held != maxEntries {
				t.Errorf("round %d: the cache answered %d keys, want %d", round, held, maxEntries)
			}
			if s.Full == 0 || s.Entries > maxEntries {
				t.Errorf("round %d: Stats = %+v", round, s)
			}
			// Once they expire, the entries make room for new keys.
			clk.Advance(ms(1000))
		}
	})
	t.Run("zero holds nothing", func(t *testing.T) {
		f := &fake{next: func(limiter.Op) limiter.Result { return *deny(1000) }}
		c := overlimit.New(f, overlimit.Options{})
		res := make([]limiter.Result, 1)
		for range 10 {
			if err := c.Take(ctx, []limiter.Op{fixed}, res); err != nil {
				t.Fatal(err)
			}
		}
		if calls, _ := f.reset(); calls != 10 || c.Stats() != (overlimit.Stats{}) {
			t.Errorf("%d store calls, Stats %+v; want 10 and nothing held", calls, c.Stats())
		}
	})
}

// TestConcurrent races callers on a few keys at one instant: the store
// alone decides what is allowed, so each key admits exactly its limit.
func TestConcurrent(t *testing.T) {
	clk := newClock()
	c := overlimit.New(store.NewMemory(store.MemoryOptions{Now: clk.Now}), overlimit.Options{MaxEntries: 16, Clock: clk})
	ops := []limiter.Op{
		with(fixed, func(op *limiter.Op) { op.Key, op.Limit, op.Window = "f", 50*milli, 3_600_000 }),
		with(sliding, func(op *limiter.Op) { op.Key, op.Limit, op.Window = "s", 30*milli, 3_600_000 }),
		with(bucket, func(op *limiter.Op) { op.Key, op.Burst, op.RateNum, op.RateDen = "t", 40*milli, 1, 3_600_000 }),
	}
	want := []int64{50, 30, 40}
	const workers, calls = 8, 300
	var allowed [3]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]limiter.Result, 2)
			for i := range calls {
				batch := []limiter.Op{ops[(w+i)%3], ops[(w+i+1)%3]}
				if err := c.Take(context.Background(), batch, res); err != nil {
					t.Error(err)
					return
				}
				for k, r := range res {
					if r.Allowed {
						allowed[(w+i+k)%3].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	for i := range ops {
		if got := allowed[i].Load(); got != want[i] {
			t.Errorf("%s: %d allowed, want %d", ops[i].Algorithm, got, want[i])
		}
	}
	if s := c.Stats(); s.Hits == 0 || s.Entries != 3 {
		t.Errorf("Stats = %+v, want hits and 3 entries", s)
	}
}

func TestStoreError(t *testing.T) {
	clk := newClock()
	f := &fake{next: func(limiter.Op) limiter.Result { return *deny(1000) }}
	c := overlimit.New(f, overlimit.Options{MaxEntries: 10, Clock: clk})
	ctx := context.Background()
	res := make([]limiter.Result, 2)
	if err := c.Take(ctx, []limiter.Op{fixed}, res); err != nil {
		t.Fatal(err)
	}
	f.err = fmt.Errorf("redis take: %w: connection refused", limiter.ErrUnavailable)
	other := with(fixed, func(op *limiter.Op) { op.Key = "other" })
	for _, ops := range [][]limiter.Op{{other}, {fixed, other}} {
		if err := c.Take(ctx, ops, res); err != f.err {
			t.Errorf("Take(%d ops) = %v, want the store's error unchanged", len(ops), err)
		}
	}
	if err := c.Take(ctx, []limiter.Op{fixed}, res); err != nil || res[0] != *deny(999) {
		t.Errorf("held op: %v, %+v", err, res[0])
	}
	if s := c.Stats(); s.Hits != 1 {
		t.Errorf("Stats = %+v, want 1 hit: a failed call counts none", s)
	}
	if err := c.Ping(ctx); err != f.err {
		t.Errorf("Ping = %v, want the store's error", err)
	}
	if err := c.Close(); err != f.err {
		t.Errorf("Close = %v, want the store's error", err)
	}
}

// TestTakeAll: all-or-nothing calls go to the store even for held keys.
func TestTakeAll(t *testing.T) {
	clk := newClock()
	f := &atomicFake{fake: fake{next: func(limiter.Op) limiter.Result { return *deny(1000) }}}
	c := overlimit.New(f, overlimit.Options{MaxEntries: 10, Clock: clk})
	ctx := context.Background()
	res := make([]limiter.Result, 1)
	if err := c.Take(ctx, []limiter.Op{fixed}, res); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ms(100))
	if err := c.TakeAll(ctx, []limiter.Op{fixed}, res); err != nil || f.all != 1 || res[0] != *deny(1000) {
		t.Errorf("TakeAll = %v, %d store calls, %+v; want the store's answer", err, f.all, res[0])
	}
	if err := c.Take(ctx, []limiter.Op{fixed}, res); err != nil || res[0] != *deny(899) {
		t.Errorf("Take after TakeAll = %v, %+v; want the held entry", err, res[0])
	}

	plain := overlimit.New(&fake{}, overlimit.Options{MaxEntries: 10})
	if err := plain.TakeAll(ctx, []limiter.Op{fixed}, res); !errors.Is(err, limiter.ErrNotAtomic) {
		t.Errorf("TakeAll over a plain store = %v, want ErrNotAtomic", err)
	}
}

// TestConformance runs the store suite through a Cache. Most of its ops
// carry explicit times and pass through; the rest use the store's clock.
func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store {
		return overlimit.New(store.NewMemory(store.MemoryOptions{}), overlimit.Options{MaxEntries: 1024})
	})
}
