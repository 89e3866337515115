package store_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestRedisMatchesMemoryLargeLimits is TestRedisMatchesMemory at the
// largest limits the rules accept (largeOps).
func TestRedisMatchesMemoryLargeLimits(t *testing.T) {
	for _, tc := range []differential{
		{name: "take", prefix: "large-differential:", seed: [2]uint64{47, 53}, rounds: 4, ops: 1500, gen: largeOps},
		{name: "take all", prefix: "large-atomic-differential:", seed: [2]uint64{59, 61}, rounds: 4, ops: 1500,
			atomic: true, gen: largeOps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachRedis(t, dbSuite, tc.prefix, func(t *testing.T, r redisStore, rdb *redis.Client) {
				tc.run(t, r, rdb)
			})
		})
	}
}

// largeOps returns n ops on a few keys at the largest limits the rules
// accept: windows of up to 2^32-1 requests and up to 1,000 years, token
// buckets of the largest bursts that refill exactly and of the slowest
// rates, with costs of large parts of them, refunds (one in five), and
// time steps from *now (a share of the window: the previous window
// counts), which it advances.
func largeOps(rng *rand.Rand, prefix string, n int, now *int64) []limiter.Op {
	const year = 365 * 86_400_000
	windows := []int64{86_400_000, 604_800_000, year, 1000 * year}
	limits := []int64{4e12, math.MaxUint32 * 1000, 1e12 + 7, 999_999_999_999}
	keys := make([]limiter.Op, 10)
	for i := range keys {
		op := limiter.Op{Key: fmt.Sprintf("%s{k%d}:", prefix, i), Algorithm: descriptors.Algorithm(rng.IntN(3)),
			Limit: limits[rng.IntN(len(limits))], Window: windows[rng.IntN(len(windows))]}
		if op.Algorithm == descriptors.TokenBucket {
			if rng.IntN(2) == 0 { // the largest burst, refilled up to 6 ms a milli-token
				op.Window, op.Limit = 1000*(1+rng.Int64N(6)), 1000
				op.Burst = descriptors.MaxAmount - rng.Int64N(1000)
			} else { // the slowest rates, with the largest burst that fills exactly
				op.Limit = 1000
				op.Burst = (descriptors.MaxExact-descriptors.MaxAmount)/(op.Window/1000) - 1 - rng.Int64N(100)
			}
			g := gcd(op.Limit, op.Window)
			op.RateNum, op.RateDen = op.Limit/g, op.Window/g
		}
		keys[i] = op
	}
	ops := make([]limiter.Op, n)
	for i := range ops {
		op := keys[rng.IntN(len(keys))]
		size := op.Limit
		if op.Algorithm == descriptors.TokenBucket {
			size = op.Burst
		}
		costs := []int64{0, 1000, size / 3, size / 2, size/7 + 1, size, 1 << 52}
		op.Cost = costs[rng.IntN(len(costs))]
		op.Refund = rng.IntN(5) == 0
		switch rng.IntN(3) {
		case 0:
			*now += rng.Int64N(op.Window/20 + 1)
		case 1:
			*now += rng.Int64N(1000)
		}
		op.Now = *now
		ops[i] = op
	}
	return ops
}
