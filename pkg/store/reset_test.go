package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// resetStore is a store that Reset is tested on.
type resetStore interface {
	limiter.Store
	limiter.Resetter
}

// TestReset: on every store and deployment, Reset gives a key of each
// algorithm its whole limit back at the store's clock, leaves other keys
// alone, is idempotent, and refuses a window that is no whole second.
func TestReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) resetStore
	}{
		{"Memory", func(*testing.T) resetStore { return store.NewMemory(store.MemoryOptions{}) }},
		{"Redis", func(t *testing.T) resetStore { r, _ := newRedis(t, dbSuite, "reset:"); return r }},
		{"Cluster", func(t *testing.T) resetStore { r, _ := newClusterStore(t, redistest.StartCluster(t)); return r }},
		{"Sentinel", func(t *testing.T) resetStore { r, _ := newSentinelStore(t, redistest.StartSentinel(t)); return r }},
	} {
		t.Run(tc.name, func(t *testing.T) { testReset(t, tc.store(t)) })
	}
}

func testReset(t *testing.T, st resetStore) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := fmt.Sprint(time.Now().UnixNano())
	month, err := descriptors.NewCalendar("Europe/Berlin", descriptors.Month, 1)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]limiter.Op{
		"fixed":   {Algorithm: descriptors.FixedWindow, Limit: 3 * descriptors.Milli, Window: 3_600_000},
		"sliding": {Algorithm: descriptors.SlidingWindow, Limit: 3 * descriptors.Milli, Window: 3_600_000},
		"bucket": {Algorithm: descriptors.TokenBucket, Burst: 3 * descriptors.Milli, RateNum: 1, RateDen: 3_600_000,
			Window: 3_600_000},
		"calendar": {Algorithm: descriptors.SlidingWindow, Limit: 3 * descriptors.Milli, Window: 30 * 86_400_000, Calendar: month},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			op.Key = "reset:{" + run + "/" + name + "}:default:"
			other := op
			other.Key = "reset:{" + run + "/" + name + "-other}:default:"
			take := func(op limiter.Op, cost int64) limiter.Result {
				t.Helper()
				op.Cost = cost
				res := make([]limiter.Result, 1)
				if err := st.Take(ctx, []limiter.Op{op}, res); err != nil {
					t.Fatal(err)
				}
				return res[0]
			}
			for _, o := range []limiter.Op{op, other} {
				take(o, 3*descriptors.Milli)
				if r := take(o, descriptors.Milli); r.Allowed {
					t.Fatalf("%s: a 4th hit of 3 was allowed", o.Key)
				}
			}
			for range 2 {
				if err := st.Reset(ctx, []limiter.Op{op}); err != nil {
					t.Fatal(err)
				}
			}
			if r := take(op, 0); !r.Allowed || r.Remaining != 3*descriptors.Milli {
				t.Errorf("after Reset: %+v, want the whole limit left", r)
			}
			if r := take(other, descriptors.Milli); r.Allowed {
				t.Errorf("Reset of %s freed %s", op.Key, other.Key)
			}
		})
	}
	bad := ops["fixed"]
	bad.Key, bad.Window = "reset:{bad}:", 1500
	if err := st.Reset(ctx, []limiter.Op{bad}); !errors.Is(err, store.ErrInvalidOp) {
		t.Errorf("Reset(window 1500 ms) = %v, want ErrInvalidOp", err)
	}
}
