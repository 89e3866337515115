package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestFixedMatchesMemory sends calls of fixed-window charges that share
// one window, cost and time (the calls fixed.lua decides: a key at most a
// few times, costs up to past 2^52) to both stores, and the same calls
// with a peek of another key added (which take.lua decides), and compares
// every result and every key's expiry.
func TestFixedMatchesMemory(t *testing.T) {
	const prefix = "fixed-differential:"
	forEachRedis(t, dbSuite, prefix, func(t *testing.T, r redisStore, rdb *redis.Client) {
		ins := inspected{r, rdb}
		m := newMemory(t, store.MemoryOptions{})
		rng := rand.New(rand.NewPCG(41, 43))
		windows := []int64{1000, 60_000, 3_600_000, 86_400_000, 1000 * 365 * 86_400_000}
		costs := []int64{1, 500, 1000, 1000, 2500, 1 << 40, 1 << 51, 1 << 62}
		ctx := context.Background()
		now := farBase
		mismatches := 0
		for round := range 8 {
			roundPrefix := fmt.Sprintf("%sr%d", prefix, round)
			for c := range 150 {
				// A key has one window: windows of two lengths that start
				// at one second share a key.
				n, wi := 1+rng.IntN(6), rng.IntN(len(windows))
				w, cost := windows[wi], costs[rng.IntN(len(costs))]
				now += rng.Int64N(w/20 + 1)
				ops := make([]limiter.Op, n)
				for i := range ops {
					ops[i] = limiter.Op{Key: fmt.Sprintf("%s{k%d-w%d}:", roundPrefix, rng.IntN(8), wi), Algorithm: descriptors.FixedWindow,
						Limit: 1 + rng.Int64N(20_000), Window: w, Cost: cost, Now: now}
				}
				if c%3 == 0 { // take.lua's call
					ops = append(ops, limiter.Op{Key: fmt.Sprintf("%s{peek-w%d}:", roundPrefix, wi), Algorithm: descriptors.FixedWindow, Limit: 1000, Window: w, Now: now})
				}
				got := make([]limiter.Result, len(ops))
				want := make([]limiter.Result, len(ops))
				if err := r.Take(ctx, ops, got); err != nil {
					t.Fatal(err)
				}
				if err := m.Take(ctx, ops, want); err != nil {
					t.Fatal(err)
				}
				for i := range ops {
					if got[i] != want[i] {
						if mismatches++; mismatches <= 5 {
							t.Errorf("round %d call %d op %d %+v: redis %+v, memory %+v", round, c, i, ops[i], got[i], want[i])
						}
					}
				}
			}
			sameExpiries(t, ins, m, roundPrefix, now)
		}
	})
}
