package limitertest

import (
	"math"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// A table is a sequence of ops on one key, with the results the semantics
// give, worked out by hand (the comments show the arithmetic).
type table struct {
	name  string
	op    limiter.Op // the algorithm and limit; Key, Now and Cost come from steps
	steps []step
	// limits replaces the Limit (windows) or Burst (token bucket) of the
	// steps it names by index, as a config reload would; debit their
	// Debit.
	limits map[int]int64
	debit  map[int]bool
	// expiries maps the suffix of every key that outlives expiryAfter
	// (both offsets from base) to its expiry.
	expiryAfter int64
	expiries    map[string]int64
}

type step struct {
	at   int64 // ms after base
	cost int64 // below 0: a refund of -cost (limiter.Op.Refund)
	want limiter.Result
}

// allow and deny build expected results.
func allow(remaining, reset int64) limiter.Result {
	return limiter.Result{Allowed: true, Remaining: remaining, Reset: reset}
}

func deny(remaining, retryAfter, reset int64) limiter.Result {
	return limiter.Result{Remaining: remaining, RetryAfter: retryAfter, Reset: reset}
}

// runTables runs every table twice: all steps in one Take call, and one
// step per call, each on its own key.
func runTables(t *testing.T, newStore func(*testing.T) limiter.Store, tables []table) {
	for _, tb := range tables {
		t.Run(tb.name, func(t *testing.T) {
			st := newStore(t)
			// One call; one op a call; the first op alone, then the rest
			// in one call, where they meet the state it wrote.
			for _, calls := range [][]int{{len(tb.steps)}, ones(len(tb.steps)), {1, len(tb.steps) - 1}} {
				key := newKey(t)
				in := make([]limiter.Op, len(tb.steps))
				for i, s := range tb.steps {
					in[i] = tb.op
					in[i].Key, in[i].Now, in[i].Cost, in[i].Refund = key, base+s.at, max(s.cost, -s.cost), s.cost < 0
					if l, ok := tb.limits[i]; ok && tb.op.Algorithm == descriptors.TokenBucket {
						in[i].Burst = l
					} else if ok {
						in[i].Limit = l
					}
					if d, ok := tb.debit[i]; ok {
						in[i].Debit = d
					}
				}
				got := takeCalls(t, st, in, calls)
				for i, s := range tb.steps {
					if got[i] != s.want {
						t.Errorf("calls %v: step %d (base%+d, cost %d) = %s, want %s",
							calls, i, s.at, s.cost, fmtResult(got[i]), fmtResult(s.want))
					}
				}
				checkExpiries(t, st, key, tb.expiryAfter, tb.expiries)
			}
		})
	}
}

func fixedWindowTables() []table {
	fixed := func(requests, window int64) limiter.Op {
		return limiter.Op{Algorithm: descriptors.FixedWindow, Limit: requests * milli, Window: window}
	}
	return []table{{
		name: "Minute",
		op:   fixed(3, minute),
		steps: []step{
			{0, 1000, allow(2000, 60000)},
			{10000, 1000, allow(1000, 50000)},
			{20000, 1000, allow(0, 40000)},
			{30000, 1000, deny(0, 30000, 30000)}, // count 4000: over, still counted
			{30000, 0, deny(0, 30000, 30000)},    // peek sees 4000
			{59999, 1000, deny(0, 1, 1)},         // count 5000
			{60000, 0, allow(3000, 60000)},       // next window, peek writes nothing
			{60000, 1000, allow(2000, 60000)},
			{61000, 500, allow(1500, 59000)}, // fractional cost
			{119999, 1500, allow(0, 1)},      // count 3000 = limit
			{119999, 0, allow(0, 1)},
		},
		expiries: map[string]int64{windowSuffix(0): minute, windowSuffix(minute): 2 * minute},
	}, {
		name: "HourBoundary",
		op:   fixed(2, hour),
		steps: []step{
			{hour - 1, 1000, allow(1000, 1)},
			{hour - 1, 1000, allow(0, 1)},
			{hour - 1, 1000, deny(0, 1, 1)},
			{hour, 1000, allow(1000, hour)},
			{2*hour - 1, 0, allow(1000, 1)},
			{2 * hour, 0, allow(2000, hour)},
		},
		expiries: map[string]int64{windowSuffix(0): hour, windowSuffix(hour): 2 * hour},
	}, {
		name: "DayBoundary",
		op:   fixed(1, day),
		steps: []step{
			{day - 1, 1000, allow(0, 1)},
			{day, 1000, allow(0, day)},
			{day + 1, 1000, deny(0, day-1, day-1)},
		},
		expiries: map[string]int64{windowSuffix(0): day, windowSuffix(day): 2 * day},
	}, {
		name: "Saturation",
		op:   fixed(3, second),
		steps: []step{
			{0, 1 << 62, deny(0, 1000, 1000)}, // count saturates at 2^52
			{0, math.MaxInt64, deny(0, 1000, 1000)},
			{1, 1000, deny(0, 999, 999)},
			{2, 0, deny(0, 998, 998)},
			{1000, 1000, allow(2000, 1000)},
			{1000, 1 << 52, deny(0, 1000, 1000)}, // 1000 + 2^52 saturates
			{1999, 0, deny(0, 1, 1)},
		},
		expiries: map[string]int64{windowSuffix(0): 1000, windowSuffix(1000): 2000},
	}}
}

func slidingWindowTables() []table {
	sliding := func(requests, window int64) limiter.Op {
		return limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: requests * milli, Window: window}
	}
	const w = week
	return []table{{
		// limit 10000 over 1000 ms: share(prev, rem) = floor(prev*rem/1000),
		// rem = 999 - elapsed (the previous window's milliseconds still in
		// the span (now-1000, now]).
		name: "Second",
		op:   sliding(10, second),
		steps: []step{
			{0, 4000, allow(6000, 1000)},
			{500, 6000, allow(0, 500)}, // weighted 4000 + 6000 = limit
			// weighted 10000; cur 10000 > limit-cost 9000, so wait into the
			// next window: share(10000, rem) <= 9000 for rem <= 900, i.e.
			// elapsed 99 there: 400 + 99.
			{600, 1000, deny(0, 499, 400)},
			// elapsed 99: rem 900, share(10000, 900) = 9000 + cost = limit.
			{1099, 1000, allow(0, 901)},
			// cur 1000, rem 899: share 8990, weighted 9990, remaining 10;
			// share(10000, rem) <= 8000 for rem <= 800, at elapsed 199.
			{1100, 1000, deny(10, 99, 900)},
			{1100, 0, allow(10, 900)}, // peek: cur 1000 + share 8990
			// rem 449: share 4490, weighted 5490 + 500 = 5990.
			{1550, 500, allow(4010, 450)},
			// last millisecond: rem 0, the previous window no longer counts.
			{2999, 1000, allow(9000, 1)},
			{5000, 20000, deny(10000, 1000, 1000)}, // cost > limit: never
			{5000, 0, allow(10000, 1000)},
		},
		expiries: map[string]int64{windowSuffix(0): 2000, windowSuffix(1000): 3000, windowSuffix(2000): 4000},
	}, {
		// W = 604,800,000 ms >= 94,000,000, so g = 1000 and Wg = 604800;
		// rem = 604799 - floor(elapsed/1000).
		name: "Week",
		op:   sliding(7, w),
		steps: []step{
			{0, 7000, allow(0, w)},
			// cur 7000 > limit-cost 6000: next window, where
			// floor(7000*rem/604800) <= 6000 for rem <= 518486, i.e. at
			// elapsed (604799-518486)*1000 = 86,313,000.
			{10, 1000, deny(0, w-10+86_313_000, w-10)},
			// elapsed 1500: rem 604798, share 6999; wait until elapsed
			// 86,313,000.
			{w + 1500, 1000, deny(1, 86_313_000-1500, w-1500)},
			// rem 518486: share 6000, weighted 6000 + 1000 = limit.
			{w + 86_313_999, 1000, allow(0, w-86_313_999)},
			// cur 1000, rem 518485: share 6000, weighted 7000; share <= 5000
			// for rem <= 432086, at elapsed (604799-432086)*1000.
			{w + 86_314_000, 1000, deny(0, 172_713_000-86_314_000, w-86_314_000)},
		},
		expiries: map[string]int64{windowSuffix(0): 2 * w, windowSuffix(w): 3 * w},
	}, {
		// The limit drops from 10 to 2: the previous count counts up to
		// the new limit only.
		name: "LimitLowered",
		op:   sliding(10, second),
		steps: []step{
			{0, 8000, allow(2000, 1000)},
			// prev = min(8000, 2000): share(2000, 999) = 1998.
			{1000, 0, allow(2, 1000)},
			// cur 0 <= 2000-1000: share(2000, rem) = 2*rem <= 1000 for
			// rem <= 500, at elapsed 499.
			{1000, 1000, deny(2, 499, 1000)},
			// rem 499: share 998, weighted 998 + 1000 = 1998.
			{1500, 1000, allow(2, 500)},
		},
		limits:   map[int]int64{1: 2000, 2: 2000, 3: 2000},
		expiries: map[string]int64{windowSuffix(0): 2000, windowSuffix(1000): 3000},
	}, {
		name: "Saturation",
		op:   sliding(3, second),
		steps: []step{
			{0, 1 << 62, deny(3000, 1000, 1000)},
			{0, math.MaxInt64, deny(3000, 1000, 1000)},
			{1, 3000, allow(0, 999)},
			{2, 1 << 52, deny(0, 1000, 998)},
			{3, 0, allow(0, 997)},
		},
		expiries: map[string]int64{windowSuffix(0): 2000},
	}}
}

func tokenBucketTables() []table {
	return []table{{
		// burst 10000, rate 10000/60000 = 1/6 milli-token per ms;
		// fill(t, c) = ceil(((10000-t)*6 - c)/1).
		name: "TenPerMinute",
		op:   tokenOp(10, minute, 10),
		steps: []step{
			{0, 1000, allow(9000, 6000)},
			{0, 9000, allow(0, 60000)},
			// 1000 ms: n = 1000, t = 166, c = 4; retry (834*6 - 4) = 5000.
			{1000, 1000, deny(166, 5000, 59000)},
			// 4999 ms more: n = 5003, t = 999, c = 5; retry (6 - 5) = 1.
			{5999, 1000, deny(999, 1, 54001)},
			{6000, 1000, allow(0, 60000)}, // n = 6: t = 1000, c = 0
			{6000, 0, allow(0, 60000)},
			{100000, 500, allow(9500, 3000)}, // full again
			{100000, 20000, deny(9500, minute, 3000)},
			{103000, 0, allow(10000, 0)},
			{103000, 10000, allow(0, 60000)},
		},
		expiryAfter: 103000,
		expiries:    map[string]int64{"tokens": 163000},
	}, {
		// burst 1000, rate 1/3600 milli-token per ms.
		name: "OnePerHour",
		op:   tokenOp(1, hour, 1),
		steps: []step{
			{0, 1000, allow(0, hour)},
			{hour / 2, 1000, deny(500, hour/2, hour/2)},
			// n = 1,799,999: t = 999, c = 3599.
			{hour - 1, 1000, deny(999, 1, 1)},
			{hour, 1000, allow(0, hour)},
			{hour, 1000, deny(0, hour, hour)},
		},
		expiryAfter: hour,
		expiries:    map[string]int64{"tokens": 2 * hour},
	}, {
		// burst 10000, rate 1/8640 milli-token per ms: a request every 2.4 h.
		name: "TenPerDay",
		op:   tokenOp(10, day, 10),
		steps: append(drain(10, 8_640_000),
			step{0, 1000, deny(0, 8_640_000, day)},
			// n = 8,639,999: t = 999, c = 8639.
			step{8_639_999, 1000, deny(999, 1, 77_760_001)},
			step{8_640_000, 1000, allow(0, day)},
		),
		expiryAfter: 8_640_000,
		expiries:    map[string]int64{"tokens": 8_640_000 + day},
	}, {
		// Peeks alone write nothing, however many share a call; the bucket
		// refills between them.
		name: "PeeksOnly",
		op:   tokenOp(10, minute, 10),
		steps: []step{
			{0, 0, allow(10000, 0)},
			{0, 0, allow(10000, 0)},
			{1000, 0, allow(10000, 0)},
		},
		expiries: map[string]int64{},
	}, {
		// The burst drops from 10 to 5: a bucket holding more is full.
		name: "BurstLowered",
		op:   tokenOp(10, minute, 10),
		steps: []step{
			{0, 1000, allow(9000, 6000)},
			{1000, 1000, allow(4000, 6000)}, // burst 5: t = 5000, minus 1000
			{1000, 0, allow(4000, 36000)},   // burst 10 again
		},
		limits:      map[int]int64{1: 5000},
		expiryAfter: 1000,
		expiries:    map[string]int64{"tokens": 7000},
	}, {
		name: "Saturation",
		op:   tokenOp(3, second, 3),
		steps: []step{
			{0, 1 << 62, deny(3000, second, 0)}, // full bucket: deleted, not written
			{0, math.MaxInt64, deny(3000, second, 0)},
			{0, 1000, allow(2000, 334)},           // 3 milli-tokens per ms: ceil(1000/3)
			{1, 1 << 52, deny(2003, second, 333)}, // ceil(997/3); state written
		},
		expiryAfter: 1,
		expiries:    map[string]int64{"tokens": 334},
	}}
}

// drain returns n allowed steps at base of one request each from a full
// bucket of n requests that refills one request every per ms.
func drain(n, per int64) []step {
	steps := make([]step, n)
	for i := range steps {
		k := int64(i) + 1
		steps[i] = step{0, 1000, allow((n-k)*1000, k*per)}
	}
	return steps
}
