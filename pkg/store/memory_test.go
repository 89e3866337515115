package store_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

func newMemory(t testing.TB, opts store.MemoryOptions) *store.Memory {
	m := store.NewMemory(opts)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestMemoryConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store { return newMemory(t, store.MemoryOptions{}) })
}

// fakeClock is a settable clock.
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) Now() time.Time   { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Set(ms int64)     { c.ms.Store(ms) }
func (c *fakeClock) Add(ms int64)     { c.ms.Add(ms) }
func (c *fakeClock) UnixMilli() int64 { return c.ms.Load() }

const t0 = int64(1_750_000_000_000) // a Unix ms, multiple of 1000

// fill writes one entry of each kind at the clock's time: a fixed window
// (expires at the end of its second), two sliding windows' counters (the
// first expires 2 s after its start), and a token bucket (expires when
// full again, 10 s later).
func fill(t *testing.T, m *store.Memory, key string) {
	t.Helper()
	ops := []limiter.Op{
		{Key: key + "f:", Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 1000, Cost: 1000},
		{Key: key + "s:", Algorithm: descriptors.SlidingWindow, Limit: 5000, Window: 1000, Cost: 1000},
		{Key: key + "b:", Algorithm: descriptors.TokenBucket, Burst: 10000, RateNum: 1, RateDen: 1, Window: 1000, Cost: 10000},
	}
	if err := m.Take(context.Background(), ops, make([]limiter.Result, len(ops))); err != nil {
		t.Fatal(err)
	}
}

func TestMemorySweep(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(t0)
	m := newMemory(t, store.MemoryOptions{Now: clock.Now})
	fill(t, m, "a")
	clock.Add(999)
	fill(t, m, "b") // same windows, later bucket
	if n := m.Len(); n != 6 {
		t.Fatalf("Len = %d, want 6", n)
	}
	for _, tc := range []struct {
		at      int64 // since t0
		removed int
	}{
		{999, 0},
		{1000, 2},   // the fixed windows
		{1999, 0},   // sliding counters live until 2000
		{2000, 2},   // the sliding windows' counters
		{10_000, 1}, // bucket a: full 10 s after t0
		{10_998, 0},
		{10_999, 1}, // bucket b
	} {
		clock.Set(t0 + tc.at)
		if got := m.Sweep(); got != tc.removed {
			t.Errorf("Sweep at t0+%d removed %d, want %d", tc.at, got, tc.removed)
		}
	}
	if n := m.Len(); n != 0 {
		t.Errorf("Len after sweeping = %d, want 0", n)
	}
}

func TestMemoryLazyExpiry(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(t0)
	m := newMemory(t, store.MemoryOptions{Now: clock.Now})
	op := limiter.Op{Key: "k:", Algorithm: descriptors.TokenBucket, Burst: 10000, RateNum: 1, RateDen: 1, Window: 1000, Cost: 1000}
	res := make([]limiter.Result, 1)
	if err := m.Take(context.Background(), []limiter.Op{op}, res); err != nil || m.Len() != 1 {
		t.Fatalf("Take = %v, Len = %d", err, m.Len())
	}
	clock.Add(1000) // full again: the peek finds the state expired and drops it
	op.Cost = 0
	if err := m.Take(context.Background(), []limiter.Op{op}, res); err != nil {
		t.Fatal(err)
	}
	if res[0] != (limiter.Result{Allowed: true, Remaining: 10000}) || m.Len() != 0 {
		t.Errorf("peek after refill = %+v, Len = %d; want full bucket, no state", res[0], m.Len())
	}
}

func TestMemoryJanitor(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(t0)
	m := store.NewMemory(store.MemoryOptions{Now: clock.Now, SweepInterval: time.Millisecond})
	ctx := context.Background()
	if err := m.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Open(ctx); err == nil {
		t.Error("second Open succeeded")
	}
	fill(t, m, "a")
	clock.Add(time.Hour.Milliseconds())
	if !wait.True(5*time.Second, func() bool { return m.Len() == 0 }) {
		t.Fatalf("janitor left %d entries", m.Len())
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	fill(t, m, "b") // still usable, and no janitor sweeps it now
	clock.Add(time.Hour.Milliseconds())
	time.Sleep(20 * time.Millisecond)
	if n := m.Len(); n != 3 {
		t.Errorf("Len after Close = %d, want 3 (nothing swept)", n)
	}
}

func TestMemoryJanitorStopsWithContext(t *testing.T) {
	m := newMemory(t, store.MemoryOptions{SweepInterval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Open(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan struct{})
	go func() { _ = m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung after the context ended")
	}
}

func TestMemoryCanceled(t *testing.T) {
	m := newMemory(t, store.MemoryOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	op := limiter.Op{Key: "k:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1000}
	err := m.Take(ctx, []limiter.Op{op}, make([]limiter.Result, 1))
	if !errors.Is(err, limiter.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Take(canceled) = %v, want ErrUnavailable and context.Canceled", err)
	}
	if m.Len() != 0 {
		t.Error("a canceled Take wrote state")
	}
}

// invalidOps are ops outside the exact range, each with what is wrong.
var invalidOps = []struct {
	name string
	op   limiter.Op
}{
	{"zero window", limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 1000, Cost: 1000}},
	{"sub-second window", limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 1000, Window: 1500, Cost: 1000}},
	{"huge window", limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1 << 50, Cost: 1000}},
	{"negative cost", limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: -1}},
	{"negative now", limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1, Now: -5}},
	{"huge limit", limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 1 << 51, Window: 1000, Cost: 1}},
	{"unknown algorithm", limiter.Op{Algorithm: 7, Limit: 1000, Window: 1000, Cost: 1}},
	{"no refill", limiter.Op{Algorithm: descriptors.TokenBucket, Burst: 1000, Window: 1000, RateDen: 1, Cost: 1}},
	{"inexact refill", limiter.Op{Algorithm: descriptors.TokenBucket, Burst: 1 << 40, Window: 1000, RateNum: 1, RateDen: 1 << 13, Cost: 1}},
}

func testInvalidOps(t *testing.T, st limiter.Store) {
	valid := limiter.Op{Key: "invalid:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1000}
	for _, tc := range invalidOps {
		tc.op.Key = "invalid:"
		err := st.Take(context.Background(), []limiter.Op{valid, tc.op}, make([]limiter.Result, 2))
		if !errors.Is(err, store.ErrInvalidOp) || errors.Is(err, limiter.ErrUnavailable) {
			t.Errorf("%s: Take = %v, want ErrInvalidOp only", tc.name, err)
		}
	}
	err := st.Take(context.Background(), []limiter.Op{valid, valid}, make([]limiter.Result, 1))
	if !errors.Is(err, store.ErrInvalidOp) {
		t.Errorf("short results: Take = %v, want ErrInvalidOp", err)
	}
	// A token bucket just inside the exact range is valid:
	// (2^50 + 1) * 7 < 2^53 (with 8 it would not be).
	edge := limiter.Op{Key: "invalid:", Algorithm: descriptors.TokenBucket, Burst: 1 << 50, RateNum: 1, RateDen: 7, Window: 1000}
	if err := st.Take(context.Background(), []limiter.Op{edge}, make([]limiter.Result, 1)); err != nil {
		t.Errorf("exact token bucket %d/%d burst %d: Take = %v", edge.RateNum, edge.RateDen, edge.Burst, err)
	}
}

func TestMemoryInvalidOps(t *testing.T) {
	m := newMemory(t, store.MemoryOptions{})
	testInvalidOps(t, m)
	if m.Len() != 0 {
		t.Errorf("Take with an invalid op wrote %d entries", m.Len())
	}
}

func BenchmarkMemoryTake(b *testing.B) {
	ops := map[string]limiter.Op{
		"fixed":   {Algorithm: descriptors.FixedWindow, Limit: 1 << 40, Window: 60000, Cost: 1000},
		"sliding": {Algorithm: descriptors.SlidingWindow, Limit: 1 << 40, Window: 60000, Cost: 1000},
		"token":   {Algorithm: descriptors.TokenBucket, Burst: 1 << 40, RateNum: 1, RateDen: 1, Window: 60000, Cost: 1000},
	}
	for _, name := range []string{"fixed", "sliding", "token"} {
		op := ops[name]
		b.Run(name, func(b *testing.B) {
			m := newMemory(b, store.MemoryOptions{})
			in := []limiter.Op{op}
			in[0].Key = "bench:{domain/key=value}:default:"
			res := make([]limiter.Result, 1)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Take(ctx, in, res); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/second-window", func(b *testing.B) {
			// Both of a sliding window's counters are held.
			m := newMemory(b, store.MemoryOptions{})
			in := []limiter.Op{op}
			in[0].Key, in[0].Now = "bench:{domain/key=value}:default:", t0
			res := make([]limiter.Result, 1)
			ctx := context.Background()
			if err := m.Take(ctx, in, res); err != nil {
				b.Fatal(err)
			}
			in[0].Now += in[0].Window
			b.ReportAllocs()
			for b.Loop() {
				in[0].Key = string([]byte(in[0].Key)) // a fresh key per call, as the limiter's
				if err := m.Take(ctx, in, res); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			m := newMemory(b, store.MemoryOptions{})
			var id atomic.Int64
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				in := []limiter.Op{op}
				in[0].Key = "bench:{domain/key=" + strconv.FormatInt(id.Add(1), 10) + "}:default:"
				res := make([]limiter.Result, 1)
				for pb.Next() {
					if err := m.Take(ctx, in, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
