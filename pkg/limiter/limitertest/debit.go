package limitertest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// debitTables are ops charged even when they do not fit (limiter.Op.Debit,
// charge: always): a sliding window holds more than its limit, the
// previous window's count uncapped; a bucket goes below zero, to -burst at
// most; a denied debit answers nothing remaining, and retry_after is when
// the same op would pass after its own charge.
func debitTables() []table {
	debit := func(op limiter.Op) limiter.Op {
		op.Debit = true
		return op
	}
	return []table{{
		// Charged denied or not, as any fixed window.
		name: "FixedWindow",
		op:   debit(limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 10 * milli, Window: second}),
		steps: []step{
			{0, 8000, allow(2000, 1000)},
			{100, 5000, deny(0, 900, 900)}, // count 13000
			{200, 0, deny(0, 800, 800)},
			{1000, 1000, allow(9000, 1000)},
		},
		expiries: map[string]int64{windowSuffix(0): 1000, windowSuffix(1000): 2000},
	}, {
		// limit 10000 over 1000 ms: share(p, rem) = floor(p*rem/1000),
		// rem = 999 - elapsed.
		name: "SlidingWindow",
		op:   debit(limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 10 * milli, Window: second}),
		steps: []step{
			{0, 8000, allow(2000, 1000)},
			// weighted 8000 + 5000 > limit: charged all the same, cur
			// 13000 > limit-cost 5000: the next window, where
			// floor(13000*rem/1000) <= 5000 for rem <= 384, at elapsed
			// 615: 900 + 615.
			{100, 5000, deny(0, 1515, 900)},
			// rem 384: share(13000, 384) = 4992, uncapped; + 5000 = 9992.
			{1615, 5000, allow(8, 385)},
			// rem 299: share 3887, weighted 5000 + 3887 + 1000 = 9887.
			{1700, 1000, allow(113, 300)},
			// cost > limit: never, and charged (cur 26000).
			{1700, 20000, deny(0, 1000, 300)},
			// rem 999: share(26000, 999) = 25974 > limit: a peek denied,
			// until floor(26000*rem/1000) <= 10000, rem <= 384.
			{2000, 0, deny(0, 615, 1000)},
		},
		expiries: map[string]int64{windowSuffix(0): 2000, windowSuffix(1000): 3000},
	}, {
		// Charges past 2^52 saturate there; the previous count weighs
		// uncapped: share(2^52, 999) = 4503599627370*999 + floor(496*999/1000).
		name: "SlidingWindowSaturation",
		op:   debit(limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 3 * milli, Window: second}),
		steps: []step{
			{0, 1 << 52, deny(0, 1000, 1000)},
			{1, 1 << 52, deny(0, 1000, 999)}, // 2^53 saturates at 2^52
			// cur 2^52 > limit-cost: the next window, until rem 0.
			{2, 1000, deny(0, 1000-2+999, 998)},
			{1000, 0, deny(0, 999, 1000)},
		},
		expiries: map[string]int64{windowSuffix(0): 2000},
	}, {
		// burst 10000, rate 1/6 milli-token per ms; fill(t) = (10000-t)*6.
		name: "TokenBucket",
		op:   debit(tokenOp(10, minute, 10)),
		steps: []step{
			{0, 8000, allow(2000, 48000)},
			// t 2000 < 5000: charged all the same, t = -3000; retry
			// (5000+3000)*6, reset (10000+3000)*6.
			{0, 5000, deny(0, 48000, 78000)},
			// 6000 ms: t = -2000; charged, -3000.
			{6000, 1000, deny(0, 24000, 78000)},
			{30000, 1000, allow(0, 60000)}, // t 1000
			// cost > burst: never; charged down to -burst.
			{30000, 20000, deny(0, minute, 120000)},
			{90000, 0, allow(0, 60000)}, // a peek is allowed; t 0
			{90000, 1000, deny(0, 12000, 66000)},
			// The limit charged when allowed again (a reload): its debt
			// is forgiven, read as empty.
			{90000, 1000, deny(0, 6000, 60000)},
		},
		debit:       map[int]bool{7: false},
		expiryAfter: 90000,
		expiries:    map[string]int64{"tokens": 150000},
	}}
}

// testBudget: a 100,000-token daily budget charged after the response
// (Envoy's apply_on_stream_done: the tokens a response used, its answer
// ignored) refuses the next request once such a charge has passed it: 99,500
// tokens used, then a response of 40,000, then a request of 1 token. On
// every algorithm, the budget alone and with a second limit of 1,000,000
// an hour (a joint), by Take and, on an AtomicStore, by TakeAll (which
// rejects the call). Charged always (Debit), every limit is charged each
// time, as the same charges alone would be; charged only when allowed,
// the 40,000 are dropped and the request passes, but for a fixed window
// alone, which counts a denied hit.
func testBudget(t *testing.T, newStore func(*testing.T) limiter.Store) {
	const tokens = 100_000
	limits := []struct{ budget, hourly limiter.Op }{
		{limiter.Op{Algorithm: descriptors.FixedWindow, Limit: tokens * milli, Window: day},
			limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 10 * tokens * milli, Window: hour}},
		{limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: tokens * milli, Window: day},
			limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 10 * tokens * milli, Window: hour}},
		{tokenOp(tokens, day, tokens), tokenOp(10*tokens, hour, 10*tokens)},
	}
	// The last step is a peek (cost 0), as Envoy checks a request whose
	// hits_addend is 0 before its response is charged.
	steps := []struct{ at, cost int64 }{{0, 99_500 * milli}, {second, 40_000 * milli}, {2 * second, milli}, {2 * second, 0}}
	st := newStore(t)
	all, atomic := st.(limiter.AtomicStore)
	for _, l := range limits {
		for _, joint := range []bool{false, true} {
			for _, byAll := range []bool{false, true} {
				for _, debit := range []bool{true, false} {
					if byAll && !atomic {
						continue
					}
					name := fmt.Sprintf("%s, joint %v, all or nothing %v, charged always %v", l.budget.Algorithm, joint, byAll, debit)
					keys, alone := atomicKeys(t, 2), atomicKeys(t, 2)
					call := func(at, cost int64) []limiter.Op {
						ops := []limiter.Op{withKey(l.budget, keys[0])}
						if joint {
							ops = append(ops, withKey(l.hourly, keys[1]))
							ops[1].Joined = true
						}
						for i := range ops {
							ops[i].Now, ops[i].Cost, ops[i].Debit = base+at, cost, debit
						}
						return ops
					}
					var got [][]limiter.Result
					for _, s := range steps {
						if byAll {
							got = append(got, takeAll(t, all, call(s.at, s.cost)))
						} else {
							got = append(got, take(t, st, call(s.at, s.cost), 2))
						}
					}
					passed := func(r []limiter.Result) bool {
						return !slices.ContainsFunc(r, func(r limiter.Result) bool { return !r.Allowed })
					}
					if !passed(got[0]) || got[1][0].Allowed {
						t.Errorf("%s: 99,500 tokens then 40,000 = %v, %v; want allowed, then the budget denying", name, got[0], got[1])
					}
					// A fixed window counts a denied hit, but not in a joint
					// that a limit denies, nor in a rejected call.
					over := debit || l.budget.Algorithm == descriptors.FixedWindow && !joint && !byAll
					if passed(got[2]) == over {
						t.Errorf("%s: the request after the 40,000 = %v, want allowed %v", name, got[2], !over)
					}
					if over && got[2][0].RetryAfter <= 0 {
						t.Errorf("%s: the refused request has retry_after %d", name, got[2][0].RetryAfter)
					}
					if passed(got[3]) == over {
						t.Errorf("%s: a peek (cost 0) after the 40,000 = %v, want allowed %v", name, got[3], !over)
					}
					if over && got[3][0].RetryAfter <= 0 {
						t.Errorf("%s: the refused peek has retry_after %d", name, got[3][0].RetryAfter)
					}
					if !joint {
						continue
					}
					// The hourly limit holds what the charges it took hold
					// alone: every one when charged always, else those of
					// the joints that passed.
					var charges []limiter.Op
					for j, s := range steps {
						if debit || passed(got[j]) {
							op := withKey(l.hourly, alone[1])
							op.Now, op.Cost, op.Debit = base+s.at, s.cost, debit
							charges = append(charges, op)
						}
					}
					take(t, st, charges, len(charges))
					peek := func(key string) limiter.Result {
						op := withKey(l.hourly, key)
						op.Now, op.Debit = base+3*second, debit
						return take(t, st, []limiter.Op{op}, 1)[0]
					}
					if a, b := peek(keys[1]), peek(alone[1]); a != b {
						t.Errorf("%s: the hourly limit afterwards %s, want %s: its charges alone", name, fmtResult(a), fmtResult(b))
					}
				}
			}
		}
	}
}
