package store_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// largeOps returns n ops on a few keys at the largest limits the rules
// accept: windows of up to 2^32-1 requests and up to 1,000 years, token
// buckets of the largest burst and of the slowest rates with the largest
// bursts that fill exactly, with costs of large parts of them (drawOps).
func largeOps(rng *rand.Rand, prefix string, n int, now *int64) []limiter.Op {
	const year = 365 * 86_400_000
	windows := []int64{86_400_000, 604_800_000, year, 1000 * year}
	limits := []int64{4e12, math.MaxUint32 * 1000, 1e12 + 7, 999_999_999_999}
	keys := make([]limiter.Op, 10)
	for i := range keys {
		op := limiter.Op{Key: fmt.Sprintf("%s{k%d}:", prefix, i), Algorithm: descriptors.Algorithm(rng.IntN(3)),
			Limit: limits[rng.IntN(len(limits))], Window: windows[rng.IntN(len(windows))]}
		if op.Algorithm == descriptors.TokenBucket {
			if rng.IntN(2) == 0 { // the largest burst, 1 to 6 ms a milli-token
				op.Window, op.Limit = 1000*(1+rng.Int64N(6)), 1000
				op.Burst = descriptors.MaxAmount - rng.Int64N(1000)
			} else { // fill time below 2^53 - 2^50 ms
				op.Limit = 1000
				op.Burst = (descriptors.MaxExact-1<<50)/(op.Window/1000) - 1 - rng.Int64N(100)
			}
			g := gcd(op.Limit, op.Window)
			op.RateNum, op.RateDen = op.Limit/g, op.Window/g
		}
		keys[i] = op
	}
	return drawOps(rng, keys, n, now, func(op limiter.Op) []int64 {
		size := op.Limit
		if op.Algorithm == descriptors.TokenBucket {
			size = op.Burst
		}
		return []int64{0, 1000, size / 3, size / 2, size/7 + 1, size, 1 << 52}
	})
}
