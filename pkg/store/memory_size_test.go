package store_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// sizeKeys is how many keys TestMemoryBytesPerKey stores per algorithm.
// The default, 250,000, puts the store's maps at the same point of their
// growth as 1M keys (each of the 64 shards' maps just split its tables,
// so about half their slots are empty): the figure is the 1M figure, the
// worst of the cycle. MEMORY_SIZE_KEYS=1000000 measures at 1M.
func sizeKeys(t *testing.T) int {
	if s := os.Getenv("MEMORY_SIZE_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("MEMORY_SIZE_KEYS=%q: want a positive count", s)
		}
		return n
	}
	return 250_000
}

// TestMemoryBytesPerKey measures the live heap a Memory holds per key, for
// each algorithm, with keys as the limiter builds them (a domain and one
// remote_address entry, about 50 bytes) and one charge each. A sliding
// window key is measured after hits in two consecutive windows, so that it
// holds both of its counters, as a busy key does.
//
// Measured with Go 1.26 at 250,000 and at 1M keys: fixed window 164,
// token bucket 181, sliding window 265 bytes per key (133 per entry);
// between the maps' growth points it is down to 126, 137 and 189. The
// bounds leave about 20 % for Go releases and longer keys' size classes.
func TestMemoryBytesPerKey(t *testing.T) {
	n := sizeKeys(t)
	lim := &descriptors.Limit{}
	for _, tc := range []struct {
		name    string
		alg     descriptors.Algorithm
		windows int // consecutive windows charged
		entries int // entries held per key
		bound   float64
	}{
		{"fixed window", descriptors.FixedWindow, 1, 1, 200},
		{"sliding window", descriptors.SlidingWindow, 2, 2, 320},
		{"token bucket", descriptors.TokenBucket, 1, 1, 220},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := make([]string, n)
			var buf []byte
			for i := range keys {
				ip := "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
				buf = limiter.AppendKey(buf[:0], "ratelimit", "rl", lim, []descriptors.Entry{{Key: "remote_address", Value: ip}}, limiter.DefaultTenant)
				keys[i] = string(buf)
			}
			clock := &fakeClock{}
			before := liveHeap()
			m := store.NewMemory(store.MemoryOptions{Now: clock.Now})
			op := limiter.Op{Algorithm: tc.alg, Limit: 100_000, Window: 60_000, Cost: 1000,
				Burst: 100_000, RateNum: 1, RateDen: 600}
			res := make([]limiter.Result, 1)
			for w := range tc.windows {
				clock.Set(t0 + int64(w)*op.Window)
				for i := range keys {
					// A fresh string per call, as the limiter makes one per request.
					op.Key = string([]byte(keys[i]))
					if err := m.Take(context.Background(), []limiter.Op{op}, res); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got, want := m.Len(), n*tc.entries; got != want {
				t.Fatalf("Len = %d, want %d", got, want)
			}
			perKey := float64(liveHeap()-before) / float64(n)
			runtime.KeepAlive(m)
			runtime.KeepAlive(keys)
			t.Logf("%s: %.0f heap bytes per key (%d keys, %d entries each)", tc.name, perKey, n, tc.entries)
			if perKey > tc.bound {
				t.Errorf("%s: %.0f heap bytes per key, want at most %.0f", tc.name, perKey, tc.bound)
			}
		})
	}
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestMemoryEndedWindows checks that a key hit in every window holds its
// current windows only: the window that ended goes when the next one is
// stored, not at the next sweep.
func TestMemoryEndedWindows(t *testing.T) {
	for _, tc := range []struct {
		alg  descriptors.Algorithm
		held int
	}{
		{descriptors.FixedWindow, 1},
		{descriptors.SlidingWindow, 2}, // the current and the previous window
	} {
		clock := &fakeClock{}
		m := newMemory(t, store.MemoryOptions{Now: clock.Now})
		op := []limiter.Op{{Key: "k:", Algorithm: tc.alg, Limit: 10_000, Window: 1000, Cost: 1000}}
		for i := range 60 {
			clock.Set(t0 + int64(i)*1000 + 500)
			if err := m.Take(context.Background(), op, make([]limiter.Result, 1)); err != nil {
				t.Fatal(err)
			}
			if got := m.Len(); got != min(i+1, tc.held) {
				t.Fatalf("%s: after a hit in window %d, Len = %d, want %d", tc.alg, i, got, min(i+1, tc.held))
			}
		}
	}
}
