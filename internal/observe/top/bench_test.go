package top_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// BenchmarkDecided is the observer's cost per decision of one descriptor
// at 64 callers (GOMAXPROCS times the parallelism), over 100,000
// identifiers of one rule, a tenth of decisions over the limit: compare
// its ns/op with the server's CPU per decision (docs/operations.md).
func BenchmarkDecided(b *testing.B) {
	f := newFixture(b, top.Options{})
	views := make([]limiter.View, 100_000)
	for i := range views {
		views[i] = view{user(fmt.Sprint("id", i))}
	}
	limit := descriptors.Match(f.set.Domain("d"), user("id0"))
	f.decide(user("id0"), limiter.OverLimit, 1)
	var seq atomic.Int64
	b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := int(seq.Add(1)) * 7919
		res := &limiter.Response{Statuses: make([]limiter.Status, 1)}
		for pb.Next() {
			n++
			code := limiter.OK
			if n%10 == 0 {
				code = limiter.OverLimit
			}
			res.Code = code
			res.Statuses[0] = limiter.Status{Code: code, Limit: limit, Hits: 1}
			f.t.Decided("d", views[n%len(views)], res, 0)
		}
	})
}
