package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// benchIdentifiers is how many precomputed identifiers BenchmarkCheck
// cycles through.
const benchIdentifiers = 1024

// benchLimiter returns a Limiter on a fresh memory store with the rules of
// domain "bench": "fw" a fixed window of an hour (nothing expires during
// a run) that never denies, "unlimited" an unlimited rule.
func benchLimiter(b *testing.B) *limiter.Limiter {
	b.Helper()
	m := store.NewMemory(store.MemoryOptions{})
	b.Cleanup(func() { _ = m.Close() })
	l := limiter.New(m, limiter.Options{})
	l.SetRules(mustSet(b, descriptors.DomainConfig{Name: "bench", Descriptors: []descriptors.Descriptor{
		{Key: "fw", Limit: &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 4_000_000_000}},
		{Key: "unlimited", Limit: &descriptors.Limit{Unlimited: true}},
	}}))
	return l
}

// benchRequest returns a request of n descriptors on key.
func benchRequest(key string, n int) *limiter.Request[descriptors.Entry] {
	req := &limiter.Request[descriptors.Entry]{Domain: "bench", Descriptors: make([]limiter.Descriptor[descriptors.Entry], n)}
	for i := range req.Descriptors {
		req.Descriptors[i].Entries = []descriptors.Entry{{Key: key}}
	}
	return req
}

// BenchmarkCheck measures one whole decision on the memory store: checks,
// matching, key building, the store's decision and the response, with 1
// and 3 descriptors per request. "unlimited" is the same path with no
// store call.
func BenchmarkCheck(b *testing.B) {
	ids := make([]string, benchIdentifiers)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	for _, key := range []string{"fw", "unlimited"} {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/descriptors=%d", key, n), func(b *testing.B) {
				l := benchLimiter(b)
				req := benchRequest(key, n)
				ctx := context.Background()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					for j := range req.Descriptors {
						req.Descriptors[j].Entries[0].Value = ids[(i*n+j)%benchIdentifiers]
					}
					if _, err := limiter.Check(ctx, l, req); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
	b.Run("fw/descriptors=1/parallel", func(b *testing.B) {
		l := benchLimiter(b)
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := benchRequest("fw", 1)
			i := rand.IntN(benchIdentifiers)
			for pb.Next() {
				req.Descriptors[0].Entries[0].Value = ids[i%benchIdentifiers]
				if _, err := limiter.Check(ctx, l, req); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

// BenchmarkCheckIdentifiers measures whether a decision's cost stays flat
// as the memory store tracks more identifiers: 1,000 against 10,000,000
// (about 1.5 GB of state; skipped with -short). The store is filled first,
// then identifiers are drawn uniformly, so most lookups of the large set
// miss the CPU caches.
func BenchmarkCheckIdentifiers(b *testing.B) {
	for _, n := range []int{1_000, 10_000_000} {
		b.Run(fmt.Sprintf("identifiers=%d", n), func(b *testing.B) {
			if n > 1_000_000 && testing.Short() {
				b.Skip("fills 10M identifiers; skipped with -short")
			}
			l := benchLimiter(b)
			req := benchRequest("fw", 1)
			ctx := context.Background()
			// The limiter copies values into keys and keeps no reference,
			// so one buffer serves every identifier without the harness
			// adding an allocation per call.
			buf := make([]byte, 0, 32)
			set := func(id int) {
				buf = strconv.AppendInt(append(buf[:0], "user-"...), int64(id), 10)
				req.Descriptors[0].Entries[0].Value = unsafe.String(&buf[0], len(buf))
			}
			for id := range n {
				set(id)
				if _, err := limiter.Check(ctx, l, req); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				set(rng.IntN(n))
				if _, err := limiter.Check(ctx, l, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
