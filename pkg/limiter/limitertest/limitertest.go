// Package limitertest is the conformance suite for limiter.Store
// implementations. Call Run from a test with a function that returns a store
// for each subtest: Run checks the algorithms with time-stepped ops whose
// results were worked out by hand, races concurrent calls, checks TakeAll
// when the store is a limiter.AtomicStore, joints (limiter.Op.Joined), and
// every key's expiry when it is an Inspector. Its keys start with KeyPrefix.
package limitertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// KeyPrefix starts every key the suite uses, for a fixture to delete.
const KeyPrefix = "limitertest:"

// Inspector is a store under test that can list its keys (Redis' SCAN and
// PEXPIRETIME), so that Run checks every key's expiry.
type Inspector interface {
	// Expiries returns the keys starting with prefix live at after (Unix
	// ms), with their expiry in Unix ms (0: none).
	Expiries(ctx context.Context, prefix string, after int64) (map[string]int64, error)
}

// Run runs the suite, subtests one after another. newStore returns a store
// for one subtest and arranges its cleanup; stores may share state, since
// every subtest has its own keys. Ops carry times a week or two ahead, so
// that state a store expires by its own clock outlives the test.
func Run(t *testing.T, newStore func(t *testing.T) limiter.Store) {
	t.Run("FixedWindow", func(t *testing.T) { runTables(t, newStore, fixedWindowTables()) })
	t.Run("SlidingWindow", func(t *testing.T) { runTables(t, newStore, slidingWindowTables()) })
	t.Run("TokenBucket", func(t *testing.T) { runTables(t, newStore, tokenBucketTables()) })
	t.Run("Refund", func(t *testing.T) { runTables(t, newStore, refundTables()) })
	t.Run("LargeLimits", func(t *testing.T) { runTables(t, newStore, largeTables()) })
	t.Run("Debit", func(t *testing.T) { runTables(t, newStore, debitTables()) })
	t.Run("Budget", func(t *testing.T) { testBudget(t, newStore) })
	t.Run("Calendar", func(t *testing.T) { runTables(t, newStore, calendarTables()) })
	t.Run("Accuracy", func(t *testing.T) { testAccuracy(t, newStore) })
	t.Run("LongRunRate", func(t *testing.T) { testLongRunRate(t, newStore) })
	t.Run("RetryAfter", func(t *testing.T) { testRetryAfter(t, newStore) })
	t.Run("Atomic", func(t *testing.T) { testAtomic(t, newStore) })
	t.Run("StoreClock", func(t *testing.T) { testStoreClock(t, newStore) })
	t.Run("AllOrNothing", func(t *testing.T) { testAllOrNothing(t, newStore) })
	t.Run("Joints", func(t *testing.T) { testJoints(t, newStore) })
	t.Run("Empty", func(t *testing.T) {
		if err := newStore(t).Take(context.Background(), nil, nil); err != nil {
			t.Fatalf("Take(no ops) = %v", err)
		}
	})
}

const (
	second = int64(1000)
	minute = 60 * second
	hour   = 60 * minute
	day    = 24 * hour
	week   = 7 * day
	milli  = descriptors.Milli
)

// base is the suite's time origin, Unix ms.
var base = func() int64 {
	return (time.Now().UnixMilli()/week + 2) * week
}()

var keySeq atomic.Int64

// runID keeps keys of repeated runs against one server apart.
var runID = strconv.FormatInt(time.Now().UnixNano()%1e9, 36)

// newKey returns a fresh base key for t, in the scheme of limiter.AppendKey.
func newKey(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '.'
	}, t.Name())
	return fmt.Sprintf("%s{%s/%s-%d}:default:", KeyPrefix, name, runID, keySeq.Add(1))
}

// windowSuffix is the suffix of the counter of the window that starts at
// base+offset.
func windowSuffix(offset int64) string {
	return strconv.FormatInt((base+offset)/1000, 10)
}

// take runs ops through st in calls of at most batch ops.
func take(t *testing.T, st limiter.Store, ops []limiter.Op, batch int) []limiter.Result {
	t.Helper()
	res := make([]limiter.Result, len(ops))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < len(ops); i += batch {
		j := min(i+batch, len(ops))
		if err := st.Take(ctx, ops[i:j], res[i:j]); err != nil {
			t.Fatalf("Take(ops %d..%d) = %v", i, j, err)
		}
	}
	return res
}

// takeCalls takes ops in calls of the given sizes, in order.
func takeCalls(t *testing.T, st limiter.Store, ops []limiter.Op, sizes []int) []limiter.Result {
	t.Helper()
	res := make([]limiter.Result, 0, len(ops))
	for _, n := range sizes {
		res = append(res, take(t, st, ops[len(res):len(res)+n], max(n, 1))...)
	}
	return res
}

// ones returns n sizes of 1: one op a call.
func ones(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// tokenOp returns a token-bucket op for requests per window with the given
// burst (in requests), as the limiter builds it.
func tokenOp(requests, window, burst int64) limiter.Op {
	num, den := reduce(requests*milli, window)
	return limiter.Op{Algorithm: descriptors.TokenBucket, Limit: requests * milli, Window: window,
		Burst: burst * milli, RateNum: num, RateDen: den}
}

func reduce(num, den int64) (int64, int64) {
	a, b := num, den
	for b != 0 {
		a, b = b, a%b
	}
	return num / a, den / a
}

// checkExpiries compares the keys under key that outlive after (an offset
// from base) with want (key suffix -> expiry offset from base), if st is
// an Inspector.
func checkExpiries(t *testing.T, st limiter.Store, key string, after int64, want map[string]int64) {
	t.Helper()
	in, ok := st.(Inspector)
	if !ok {
		return
	}
	got, err := in.Expiries(context.Background(), key, base+after)
	if err != nil {
		t.Fatalf("Expiries: %v", err)
	}
	for k, exp := range got {
		suffix := strings.TrimPrefix(k, key)
		w, ok := want[suffix]
		switch {
		case !ok:
			t.Errorf("unexpected key %q (expires at base%+d)", suffix, exp-base)
		case exp <= 0:
			t.Errorf("key %q has no expiry, want base%+d", suffix, w)
		case exp != base+w:
			t.Errorf("key %q expires at base%+d, want base%+d", suffix, exp-base, w)
		}
	}
	for suffix, w := range want {
		if _, ok := got[key+suffix]; !ok {
			t.Errorf("key %q missing, want one expiring at base%+d", suffix, w)
		}
	}
}

func fmtResult(r limiter.Result) string {
	return fmt.Sprintf("{allowed:%v remaining:%d retry_after:%d reset:%d}", r.Allowed, r.Remaining, r.RetryAfter, r.Reset)
}
