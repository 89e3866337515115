package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestMemoryConformanceBounded: a bound that is not reached changes no
// decision.
func TestMemoryConformanceBounded(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store {
		return newMemory(t, store.MemoryOptions{MaxKeys: 1 << 20})
	})
}

// boundOp is one op of the bound tests: 1 of a limit of 10 a second.
func boundOp(alg descriptors.Algorithm, key string, cost int64) limiter.Op {
	op := limiter.Op{Key: key, Algorithm: alg, Limit: 10_000, Window: 1000, Cost: cost}
	if alg == descriptors.TokenBucket {
		op.Burst, op.RateNum, op.RateDen = 10_000, 10, 1
	}
	return op
}

// TestMemoryMaxKeys steps a store bounded at 4 keys' entries (8 for
// sliding windows, which hold two windows a key) through the policy:
// a call that would add an entry to a full store is refused whole; calls
// on held entries, peeks and window rollovers go on; expired state makes
// room again.
func TestMemoryMaxKeys(t *testing.T) {
	for _, alg := range []descriptors.Algorithm{descriptors.FixedWindow, descriptors.SlidingWindow, descriptors.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := &fakeClock{}
			clock.Set(t0)
			perKey := 1
			if alg == descriptors.SlidingWindow {
				perKey = 2
			}
			m := newMemory(t, store.MemoryOptions{Now: clock.Now, MaxKeys: 4 * perKey})
			ctx := context.Background()
			type step struct {
				name         string
				advance      int64    // ms before the step
				keys         []string // one op per key, cost 1000
				peek         bool     // cost 0 instead
				allOrNothing bool     // TakeAll instead of Take
				refused      bool     // the call fails with ErrFull
			}
			steps := []step{{name: "fill", keys: []string{"a", "b", "c", "d"}}}
			if perKey == 2 {
				steps = append(steps, step{name: "fill the next windows", advance: 1000, keys: []string{"a", "b", "c", "d"}})
			}
			steps = append(steps, []step{
				{name: "a new key", keys: []string{"e"}, refused: true},
				{name: "a held key and a new one: refused whole", keys: []string{"a", "e"}, refused: true},
				{name: "a new key, all or nothing", keys: []string{"e"}, allOrNothing: true, refused: true},
				{name: "held keys go on", keys: []string{"a", "b"}},
				{name: "held keys, all or nothing", keys: []string{"c", "d"}, allOrNothing: true},
				{name: "a peek at a new key", keys: []string{"e"}, peek: true},
				{name: "next window: held keys roll over", advance: 1000, keys: []string{"a", "b", "c", "d"}},
				{name: "still full", keys: []string{"e"}, refused: true},
				{name: "everything expired: swept, room", advance: 60_000, keys: []string{"e"}},
			}...)
			refused := int64(0)
			for _, s := range steps {
				clock.Add(s.advance)
				ops := make([]limiter.Op, len(s.keys))
				for i, k := range s.keys {
					cost := int64(1000)
					if s.peek {
						cost = 0
					}
					ops[i] = boundOp(alg, k, cost)
				}
				before := peekAll(t, m, alg, "a")
				res := make([]limiter.Result, len(ops))
				var err error
				if s.allOrNothing {
					err = m.TakeAll(ctx, ops, res)
				} else {
					err = m.Take(ctx, ops, res)
				}
				if s.refused {
					refused++
					if !errors.Is(err, store.ErrFull) || !errors.Is(err, limiter.ErrUnavailable) {
						t.Fatalf("%s: %v, want ErrFull and ErrUnavailable", s.name, err)
					}
					if after := peekAll(t, m, alg, "a"); after != before {
						t.Fatalf("%s: a refused call charged a held key: %+v, then %+v", s.name, before, after)
					}
				} else if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				st := m.Stats()
				if st.Refused != refused || st.Keys != int64(m.Len()) {
					t.Fatalf("%s: stats %+v, Len %d, %d refusals so far", s.name, st, m.Len(), refused)
				}
				if st.Keys > int64(4*perKey) {
					t.Fatalf("%s: %d entries held past the bound of %d", s.name, st.Keys, 4*perKey)
				}
			}
		})
	}
}

// peekAll returns the result of a peek at key.
func peekAll(t *testing.T, m *store.Memory, alg descriptors.Algorithm, key string) limiter.Result {
	t.Helper()
	res := make([]limiter.Result, 1)
	if err := m.Take(context.Background(), []limiter.Op{boundOp(alg, key, 0)}, res); err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestMemoryKeysCount runs random calls, all or nothing or not, across
// keys, algorithms, time and sweeps: the count of entries held always
// equals Len.
func TestMemoryKeysCount(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(t0)
	for _, max := range []int{0, 20} {
		m := newMemory(t, store.MemoryOptions{Now: clock.Now, MaxKeys: max})
		rng := rand.New(rand.NewPCG(1, uint64(max)))
		algs := []descriptors.Algorithm{descriptors.FixedWindow, descriptors.SlidingWindow, descriptors.TokenBucket}
		for i := range 3000 {
			clock.Add(rng.Int64N(300))
			n := 1 + rng.IntN(3)
			ops := make([]limiter.Op, n)
			for j := range ops {
				ops[j] = boundOp(algs[rng.IntN(3)], fmt.Sprint("k", rng.IntN(40)), rng.Int64N(4)*1000)
			}
			res := make([]limiter.Result, n)
			var err error
			switch rng.IntN(10) {
			case 0:
				m.Sweep()
			case 1, 2:
				err = m.TakeAll(context.Background(), ops, res)
			default:
				err = m.Take(context.Background(), ops, res)
			}
			if err != nil && !errors.Is(err, store.ErrFull) {
				t.Fatal(err)
			}
			if st := m.Stats(); st.Keys != int64(m.Len()) {
				t.Fatalf("max %d, call %d: Stats().Keys %d, Len %d", max, i, st.Keys, m.Len())
			}
		}
		if max > 0 && m.Stats().Refused == 0 {
			t.Errorf("40 keys in a store of 20 were never refused")
		}
	}
}
