package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// counting counts the calls that reach the real store beneath.
type counting struct {
	limiter.Store
	calls atomic.Int64
}

func (c *counting) Take(ctx context.Context, ops []limiter.Op, res []limiter.Result) error {
	c.calls.Add(1)
	return c.Store.Take(ctx, ops, res)
}

func TestCoalescerConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		limitertest.Run(t, func(t *testing.T) limiter.Store {
			return store.NewCoalescer(store.NewMemory(store.MemoryOptions{}), store.CoalesceOptions{})
		})
	})
	t.Run("redis", func(t *testing.T) {
		limitertest.Run(t, func(t *testing.T) limiter.Store {
			r, _ := newRedis(t, dbSuite, limitertest.KeyPrefix)
			return store.NewCoalescer(r, store.CoalesceOptions{})
		})
	})
}

// TestCoalescerMergesAndStaysExact: many concurrent callers on one limit
// admit exactly the limit, through fewer store calls than callers.
func TestCoalescerMergesAndStaysExact(t *testing.T) {
	r, _ := newRedis(t, dbSuite, "coalesce:")
	under := &counting{Store: r}
	c := store.NewCoalescer(under, store.CoalesceOptions{InFlight: 2})
	const callers, each, limit = 64, 20, 300
	op := limiter.Op{Key: fmt.Sprintf("coalesce:{%d}:t:", time.Now().UnixNano()), Algorithm: descriptors.FixedWindow,
		Limit: limit * descriptors.Milli, Window: 86_400_000, Cost: descriptors.Milli}
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]limiter.Result, 1)
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := c.Take(ctx, []limiter.Op{op}, res)
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
				case res[0].Allowed:
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || admitted.Load() != limit {
		t.Fatalf("admitted %d, failed %d; want exactly %d admitted", admitted.Load(), failed.Load(), limit)
	}
	calls := under.calls.Load()
	t.Logf("%d takes reached Redis in %d pipelines", callers*each, calls)
	if calls >= callers*each {
		t.Fatalf("no call was merged: %d store calls for %d takes", calls, callers*each)
	}
}

func TestCoalescerFailsEveryMemberAndRetriesNothing(t *testing.T) {
	r, err := store.NewRedisFromURL("redis://127.0.0.1:1/0", store.ConnOptions{DialTimeout: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	under := &counting{Store: r}
	c := store.NewCoalescer(under, store.CoalesceOptions{InFlight: 1, Timeout: 200 * time.Millisecond})
	op := limiter.Op{Key: "x:{y}:z:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1000}
	var wg sync.WaitGroup
	var errs atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Take(context.Background(), []limiter.Op{op}, make([]limiter.Result, 1)); err != nil {
				errs.Add(1)
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 16 {
		t.Fatalf("%d of 16 calls failed on a dead store", errs.Load())
	}
	if under.calls.Load() > 16 {
		t.Fatalf("%d store calls for 16 takes: something was retried", under.calls.Load())
	}
}

func TestCoalescerPassesAtomicCallsThrough(t *testing.T) {
	c := store.NewCoalescer(store.NewMemory(store.MemoryOptions{}), store.CoalesceOptions{})
	op := limiter.Op{Key: "all:{d}/k=v:t:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 60_000, Cost: 1000, Now: 1_000_000, Veto: limiter.VetoAlone}
	res := make([]limiter.Result, 2)
	if err := c.TakeAll(context.Background(), []limiter.Op{op, op}, res); err != nil {
		t.Fatal(err)
	}
	if !res[0].Allowed || res[1].Allowed {
		t.Fatalf("second charge of a limit of 1 passed: %+v", res)
	}
	// Rejected: nothing was charged, so a single charge still passes.
	if err := c.TakeAll(context.Background(), []limiter.Op{op}, res[:1]); err != nil || !res[0].Allowed {
		t.Fatalf("after a rejected all-or-nothing call: %+v, %v", res[0], err)
	}
}
