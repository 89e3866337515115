package limitertest

import (
	"math"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// largeTables are steps at the largest limits the rules accept
// (requests_per_unit up to 2^32-1, windows up to 1,000 years, a burst up
// to descriptors.MaxAmount that fills exactly), where a product of two
// of their numbers passes 2^53 (and int64): the sliding window's share
// of the previous window and a token bucket's refill and fill times.
// The results were computed exactly, with big integers.
func largeTables() []table {
	const (
		rpuMax  = math.MaxUint32 * milli // the largest requests_per_unit
		year    = 365 * day
		millenn = 1000 * year // unit: year, unit_multiplier: 1000
	)
	largest := limiter.Op{Algorithm: descriptors.TokenBucket, Limit: milli, Window: 6 * second,
		Burst: descriptors.MaxAmount, RateNum: 1, RateDen: 6}
	return []table{{
		name: "FixedWindowLargestLimit",
		op:   limiter.Op{Algorithm: descriptors.FixedWindow, Limit: rpuMax, Window: day},
		steps: []step{
			{0, rpuMax - 1, allow(1, day)},
			{1, 1, allow(0, day-1)},
			{2, 1, deny(0, day-2, day-2)},
			{3, -2, allow(1, day-3)},
		},
		expiries: map[string]int64{windowSuffix(0): day},
	}, {
		// 4e9 a day: W = 86,400,000 ms, one step a ms (wg = W). The whole
		// limit in the first day; 84,090,946 ms into the next the previous
		// window has rem = 2,309,053 steps left: share(4e12, rem) =
		// floor(4e12 * 2,309,053 / 86,400,000) = 106,900,601,851 (the
		// product, 9.2e18, is past 2^53, and floor(p*rem/wg) in doubles
		// is 106,900,601,850.99998).
		name: "SlidingWindow4e9ADay",
		op:   limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 4e12, Window: day},
		steps: []step{
			{0, 4e12, allow(0, day)},
			{day + 84_090_946, 0, allow(3_893_099_398_149, 2_309_054)},
			{day + 84_090_946, 3_893_099_398_149, allow(0, 2_309_054)},
			// Over: the share must drop by 1000 milli-requests, which it
			// does 1 ms later (each ms drops it by 46,296 or 46,297).
			{day + 84_090_946, milli, deny(0, 1, 2_309_054)},
			{day + 84_090_947, milli, allow(45_296, 2_309_053)},
		},
		expiries: map[string]int64{windowSuffix(0): 2 * day, windowSuffix(day): 3 * day},
	}, {
		// 2^32-1 per 1,000 years: g = 1,000,000 ms, wg = 31,536,000. The
		// window holding base starts at 0 (base is within the first
		// 1,000 years); the next at W = 3.1536e13. Past its start by
		// 31,267,558,123,456 ms, rem = 268,441: share = 36,559,656,127.
		name: "SlidingWindowLargestLimitLongestWindow",
		op:   limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: rpuMax, Window: millenn},
		steps: []step{
			{0, rpuMax, allow(0, millenn-base)},
			{millenn - base + 31_267_558_123_456, 0, allow(4_258_407_638_873, 268_441_876_544)},
			{millenn - base + 31_267_558_123_456, 4_258_407_638_873, allow(0, 268_441_876_544)},
			{millenn - base + 31_267_558_123_456, milli, deny(0, 876_544, 268_441_876_544)},
			{millenn - base + 31_267_558_123_456 + 876_543, milli, deny(0, 1, 268_441_000_001)},
			{millenn - base + 31_267_558_123_456 + 876_544, milli, allow(135_193, 268_441_000_000)},
			{millenn - base + 31_267_558_123_456, rpuMax + milli, deny(0, millenn, 268_441_876_544)},
		},
		expiries: map[string]int64{"0": 2*millenn - base, windowSuffix(millenn - base): 3*millenn - base},
	}, {
		// The largest burst, 2^50 milli-tokens, at the slowest rate that
		// fills it exactly (descriptors.Limit.Validate): 1 request per 6 s,
		// 1/6 milli-token a ms. Filling it takes 6 * 2^50 ms.
		name: "TokenBucketLargestBurst",
		op:   largest,
		steps: []step{
			{0, descriptors.MaxAmount - milli, allow(milli, 6*(descriptors.MaxAmount-milli))},
			{6, 2 * milli, deny(1001, 5994, 6*(descriptors.MaxAmount-1001))},
			{6000, 2 * milli, allow(0, 6*descriptors.MaxAmount)},
		},
		expiryAfter: 6000,
		expiries:    map[string]int64{"tokens": 6000 + 6*descriptors.MaxAmount},
	}, {
		name: "TokenBucketLargestBurstRefund",
		op:   largest,
		steps: []step{
			{0, descriptors.MaxAmount, allow(0, 6*descriptors.MaxAmount)},
			{1, -descriptors.MaxAmount, allow(descriptors.MaxAmount, 0)}, // full: deleted
		},
		expiries: map[string]int64{},
	}, {
		// The slowest rate, 1 request per 1,000 years (1/31,536,000,000
		// milli-token a ms), with the largest burst it fills exactly,
		// 249.914 requests: 249,914 * 31,536,000,000 < 2^53 - 2^50.
		name: "TokenBucketSlowestRate",
		op: limiter.Op{Algorithm: descriptors.TokenBucket, Limit: milli, Window: millenn,
			Burst: 249_914, RateNum: 1, RateDen: 31_536_000_000},
		steps: []step{
			{0, 249_000, allow(914, 249_000*31_536_000_000)},
			{year, milli, deny(915, 85*31_536_000_000, 248_999*31_536_000_000)}, // a year refills 1 milli-token
			{year + 1, 0, allow(915, 248_999*31_536_000_000-1)},
		},
		expiryAfter: year,
		expiries:    map[string]int64{"tokens": 249_000 * 31_536_000_000},
	}}
}
