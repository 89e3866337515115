package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// batchedStore is a store that merges concurrent Takes.
type batchedStore interface {
	limiter.Store
	BatchStats() store.BatchStats
}

// TestBatchedMatchesMemory: many callers at once, each with its own keys
// and a random sequence of Takes (all algorithms, peeks, fractions, huge
// costs, time steps), so that their ops share script calls, and so that a
// call holds several ops of one key (take.lua's groups) as well as lone
// ones. Every answer must equal what the memory store answers for the same
// caller's sequence alone: a decision merged into a batched call is the
// unbatched decision. On a single server, a Cluster (take.lua's cross-slot
// mode) and a Sentinel-managed server.
func TestBatchedMatchesMemory(t *testing.T) {
	const prefix = "batched:"
	t.Run("go-redis", func(t *testing.T) {
		r, rdb := newRedis(t, dbSuite, prefix)
		batchedMatchesMemory(t, prefix, r, rdb)
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a cluster")
		}
		r, _ := newClusterStore(t, redistest.StartCluster(t))
		batchedMatchesMemory(t, prefix, r, nil)
	})
	t.Run("sentinel", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts sentinels")
		}
		r, _ := newSentinelStore(t, redistest.StartSentinel(t))
		batchedMatchesMemory(t, prefix, r, nil)
	})
}

func batchedMatchesMemory(t *testing.T, prefix string, r batchedStore, rdb *redis.Client) {
	if rdb != nil {
		t.Cleanup(func() { redistest.DeleteKeys(t, rdb, prefix) })
	}
	const callers, opsEach = 32, 300
	run := fmt.Sprintf("%s%d:", prefix, time.Now().UnixNano())
	seqs := make([][]limiter.Op, callers)
	for c := range seqs {
		rng := rand.New(rand.NewPCG(uint64(c), 9))
		now := farBase
		seqs[c] = randomOps(rng, fmt.Sprintf("%sc%d:", run, c), opsEach, &now)
	}
	got := make([][]limiter.Result, callers)
	before := r.BatchStats()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		got[c] = make([]limiter.Result, opsEach)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for i := 0; i < opsEach; {
				n := min(1+rng.IntN(3), opsEach-i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := r.Take(ctx, seqs[c][i:i+n], got[c][i:i+n])
				cancel()
				if err != nil {
					errs <- fmt.Errorf("caller %d take %d: %w", c, i, err)
					return
				}
				i += n
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := newMemory(t, store.MemoryOptions{})
	mismatches := 0
	for c := range callers {
		want := make([]limiter.Result, opsEach)
		for i := range seqs[c] {
			if err := m.Take(context.Background(), seqs[c][i:i+1], want[i:i+1]); err != nil {
				t.Fatal(err)
			}
			if got[c][i] != want[i] {
				if mismatches++; mismatches <= 5 {
					t.Errorf("caller %d op %d %+v: batched %+v, memory %+v", c, i, seqs[c][i], got[c][i], want[i])
				}
			}
		}
	}
	after := r.BatchStats()
	sends, ops := after.Sends-before.Sends, after.Ops-before.Ops
	t.Logf("%d ops of %d callers in %d sends (%.1f ops a send); %d mismatches", ops, callers, sends, float64(ops)/float64(max(sends, 1)), mismatches)
	if ops != callers*opsEach {
		t.Errorf("%d ops sent for %d taken: something was sent twice or not at all", ops, callers*opsEach)
	}
	if sends >= ops {
		t.Errorf("no Take was merged with another: %d sends for %d ops", sends, ops)
	}
}
