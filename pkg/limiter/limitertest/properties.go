package limitertest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// testRetryAfter checks on random histories that an op denied at T is
// denied at T+retry_after-1 and allowed at T+retry_after; one that can never
// pass gets the window length (the reset, for a fixed window).
func testRetryAfter(t *testing.T, newStore func(*testing.T) limiter.Store) {
	st := newStore(t)
	rng := rand.New(rand.NewPCG(7, 11))
	windows := []int64{second, minute, hour, day, week}
	costs := []int64{0, 500, 1000, 1000, 1000, 1500, 2500}

	type history struct {
		ops []limiter.Op // the last one is the op under test
	}
	var hs []history
	for range 300 {
		w := windows[rng.IntN(len(windows))]
		requests := 1 + rng.Int64N(5)
		alg := descriptors.Algorithm(rng.IntN(3))
		op := limiter.Op{Algorithm: alg, Limit: requests*milli + 500*rng.Int64N(2), Window: w}
		if alg == descriptors.TokenBucket {
			op = tokenOp(requests, w, 1+rng.Int64N(2*requests))
		}
		now := base + rng.Int64N(w)
		var h history
		for range 1 + rng.IntN(12) {
			op.Now, op.Cost = now, costs[rng.IntN(len(costs))]
			h.ops = append(h.ops, op)
			if rng.IntN(3) == 0 {
				now += rng.Int64N(w/2 + 1)
			}
		}
		last := &h.ops[len(h.ops)-1]
		if rng.IntN(8) == 0 {
			last.Cost = max(op.Limit, op.Burst) + 500 // never passes
		}
		hs = append(hs, h)
	}

	// run sends every history followed by extra(i) on a fresh key, all in
	// one Take, and returns the results of each history's last op and of
	// the extra ops.
	run := func(extra func(i int) []limiter.Op) [][]limiter.Result {
		var in []limiter.Op
		var spans [][2]int
		for i, h := range hs {
			key := newKey(t)
			from := len(in)
			for _, o := range slices.Concat(h.ops, extra(i)) {
				o.Key = key
				in = append(in, o)
			}
			spans = append(spans, [2]int{from + len(h.ops) - 1, len(in)})
		}
		res := take(t, st, in, batch)
		out := make([][]limiter.Result, len(hs))
		for i, sp := range spans {
			out[i] = res[sp[0]:sp[1]]
		}
		return out
	}

	first := run(func(int) []limiter.Op { return nil })
	// probe repeats a denied last op d ms after its retry_after.
	probe := func(d int64) func(i int) []limiter.Op {
		return func(i int) []limiter.Op {
			last, r := hs[i].ops[len(hs[i].ops)-1], first[i][0]
			if r.Allowed || never(last) {
				return nil
			}
			last.Now += r.RetryAfter + d
			return []limiter.Op{last}
		}
	}
	before, after := run(probe(-1)), run(probe(0))

	denials := 0
	for i, h := range hs {
		last, r := h.ops[len(h.ops)-1], first[i][0]
		if r.Allowed {
			continue
		}
		denials++
		if never(last) {
			want := last.Window
			if last.Algorithm == descriptors.FixedWindow {
				want = r.Reset
			}
			if r.RetryAfter != want {
				t.Errorf("history %d (%s): cost %d can never pass, retry_after = %d, want %d", i, last.Algorithm, last.Cost, r.RetryAfter, want)
			}
			continue
		}
		if r.RetryAfter <= 0 {
			t.Errorf("history %d (%s): denied with retry_after %d", i, last.Algorithm, r.RetryAfter)
			continue
		}
		if before[i][1].Allowed {
			t.Errorf("history %d (%s, limit %d, window %d): denied %s at base%+d, but allowed 1 ms before retry_after",
				i, last.Algorithm, last.Limit, last.Window, fmtResult(r), last.Now-base)
		}
		if !after[i][1].Allowed {
			t.Errorf("history %d (%s, limit %d, window %d): denied %s at base%+d, and still denied after retry_after: %s",
				i, last.Algorithm, last.Limit, last.Window, fmtResult(r), last.Now-base, fmtResult(after[i][1]))
		}
	}
	if denials < 50 {
		t.Errorf("only %d of %d histories end in a denial; the test needs more", denials, len(hs))
	}
}

// never reports whether op's cost exceeds its window's limit or its
// bucket, so that it can never pass.
func never(op limiter.Op) bool {
	if op.Algorithm == descriptors.TokenBucket {
		return op.Cost > op.Burst
	}
	return op.Cost > op.Limit
}

// testRaces races goroutines for one key: each op is decided whole, so
// exactly the limit passes.
func testRaces(t *testing.T, newStore func(*testing.T) limiter.Store) {
	st := newStore(t)
	const workers, calls, perCall, limit = 8, 10, 5, 100
	for _, alg := range []descriptors.Algorithm{descriptors.FixedWindow, descriptors.SlidingWindow, descriptors.TokenBucket} {
		op := limiter.Op{Algorithm: alg, Limit: limit * milli, Window: hour}
		if alg == descriptors.TokenBucket {
			op = tokenOp(limit, hour, limit)
		}
		op.Key, op.Now, op.Cost = newKey(t), base+1234, 1000
		var mu sync.Mutex
		allowed := 0
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				in := []limiter.Op{op, op, op, op, op}
				res := make([]limiter.Result, perCall)
				for range calls {
					if err := st.Take(context.Background(), in, res); err != nil {
						t.Errorf("Take: %v", err)
						return
					}
					mu.Lock()
					for _, r := range res {
						if r.Allowed {
							allowed++
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if allowed != limit {
			t.Errorf("%s: %d of %d concurrent ops allowed, want %d", alg, allowed, workers*calls*perCall, limit)
		}
	}
}

// testStoreClock sends ops with Now == 0, which the store times itself.
func testStoreClock(t *testing.T, newStore func(*testing.T) limiter.Store) {
	st := newStore(t)
	const tolerance = 10 * second // between the test's clock and the store's

	fixed := limiter.Op{Algorithm: descriptors.FixedWindow, Key: newKey(t), Limit: 5 * milli, Window: hour, Cost: 1000}
	wall := time.Now().UnixMilli()
	res := take(t, st, []limiter.Op{fixed, fixed}, 2)
	if !res[0].Allowed || res[0].Remaining != 4000 || res[0].Reset <= 0 || res[0].Reset > hour {
		t.Errorf("fixed window, first op = %s", fmtResult(res[0]))
	}
	if want := hour - wall%hour; res[0].Reset-want > tolerance || want-res[0].Reset > tolerance {
		if want > tolerance && want < hour-tolerance { // not near the top of the hour
			t.Errorf("fixed window reset = %d ms, want about %d by this clock", res[0].Reset, want)
		}
	}
	if res[1].Reset <= res[0].Reset && (!res[1].Allowed || res[1].Remaining != 3000) {
		t.Errorf("fixed window, second op = %s", fmtResult(res[1]))
	}

	bucket := tokenOp(2, hour, 2) // one request per 1,800,000 ms
	bucket.Key, bucket.Cost = newKey(t), 1000
	res = take(t, st, []limiter.Op{bucket, bucket, bucket}, 3)
	if want := allow(1000, 1_800_000); res[0] != want {
		t.Errorf("token bucket, first op = %s, want %s", fmtResult(res[0]), fmtResult(want))
	}
	if !res[1].Allowed || res[1].Remaining >= 1000 || res[1].Reset > hour || res[1].Reset < hour-tolerance {
		t.Errorf("token bucket, second op = %s", fmtResult(res[1]))
	}
	if res[2].Allowed || res[2].RetryAfter <= 0 || res[2].RetryAfter > 1_800_000 {
		t.Errorf("token bucket, third op = %s", fmtResult(res[2]))
	}

	sliding := limiter.Op{Algorithm: descriptors.SlidingWindow, Key: newKey(t), Limit: 1 * milli, Window: second, Cost: 1000}
	res = take(t, st, []limiter.Op{sliding, sliding}, 2)
	if !res[0].Allowed || res[1].Allowed || res[1].RetryAfter <= 0 || res[1].RetryAfter > 2*second {
		t.Errorf("sliding window = %s, %s", fmtResult(res[0]), fmtResult(res[1]))
	}
}
