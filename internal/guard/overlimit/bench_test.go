package overlimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/guard/overlimit"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// nop is a store that answers at once: it denies keys starting with "hot"
// for an hour and allows the others.
type nop struct{}

func (nop) Take(_ context.Context, ops []limiter.Op, res []limiter.Result) error {
	for i := range ops {
		if strings.HasPrefix(ops[i].Key, "hot") {
			res[i] = limiter.Result{RetryAfter: 3_600_000, Reset: 3_600_000}
			continue
		}
		res[i] = limiter.Result{Allowed: true, Remaining: 1000}
	}
	return nil
}

func (nop) Ping(context.Context) error { return nil }
func (nop) Close() error               { return nil }

// benchCache returns a Cache over nop holding held hot keys.
func benchCache(b *testing.B, held int) *overlimit.Cache {
	c := overlimit.New(nop{}, overlimit.Options{Bytes: 10_000 * overlimit.EntryBytes})
	res := make([]limiter.Result, 1)
	for i := range held {
		op := fixed
		op.Key = fmt.Sprintf("hot%d", i)
		if err := c.Take(context.Background(), []limiter.Op{op}, res); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func benchOps(keys ...string) []limiter.Op {
	ops := make([]limiter.Op, len(keys))
	for i, k := range keys {
		ops[i] = fixed
		ops[i].Key = "{fastlimit}:{domain/" + k + "=value}:default:"
		if strings.HasPrefix(k, "hot") {
			ops[i].Key = k
		}
	}
	return ops
}

func runTake(b *testing.B, c *overlimit.Cache, ops []limiter.Op) {
	res := make([]limiter.Result, len(ops))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Take(ctx, ops, res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeMiss: no op is held, every op goes to the store.
func BenchmarkTakeMiss(b *testing.B) {
	b.Run("empty/1", func(b *testing.B) { runTake(b, benchCache(b, 0), benchOps("a")) })
	b.Run("empty/4", func(b *testing.B) { runTake(b, benchCache(b, 0), benchOps("a", "b", "c", "d")) })
	b.Run("held1000/1", func(b *testing.B) { runTake(b, benchCache(b, 1000), benchOps("a")) })
	b.Run("held1000/4", func(b *testing.B) { runTake(b, benchCache(b, 1000), benchOps("a", "b", "c", "d")) })
}

// BenchmarkTakeHit: the cache answers every op.
func BenchmarkTakeHit(b *testing.B) {
	b.Run("1", func(b *testing.B) { runTake(b, benchCache(b, 1000), benchOps("hot1")) })
	b.Run("4", func(b *testing.B) { runTake(b, benchCache(b, 1000), benchOps("hot1", "hot2", "hot3", "hot4")) })
}

// BenchmarkTakeMixed: the cache answers some ops and sends the rest.
func BenchmarkTakeMixed(b *testing.B) {
	runTake(b, benchCache(b, 1000), benchOps("a", "hot1", "b", "hot2"))
}

// BenchmarkTakeParallel: many callers on held and unheld keys.
func BenchmarkTakeParallel(b *testing.B) {
	c := benchCache(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ops := benchOps("a", "hot1", "b", "hot2")
		res := make([]limiter.Result, len(ops))
		for pb.Next() {
			if err := c.Take(context.Background(), ops, res); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
