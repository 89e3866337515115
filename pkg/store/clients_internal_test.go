package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// BenchmarkClients compares the Redis clients on the batched path: the same
// batcher merges concurrent Takes of one fixed-window op each into take.lua
// calls, sent by go-redis (Redis) or by rueidis (retries off, flush delay
// tuned). 64 callers, 100,000 keys. (The project's own RESP client,
// package resp, was measured here too, and deleted: it did not win by 10 %;
// BENCHMARKS.md has the paired figures.) Run it with -count:
//
//	FASTLIMIT_REQUIRE_REDIS=1 go test -run '^$' -bench BenchmarkClients -count 5 ./pkg/store/
//
// Besides ns/op it reports the benchmark process's CPU per decision
// (cpu-us/op: the client, the batcher and the callers), Redis' CPU per
// decision (redis-us/op, from INFO cpu) and the ops per script call.
func BenchmarkClients(b *testing.B) {
	addr := redistest.Addr(b)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		open func(b *testing.B) (limiter.Store, func() BatchStats)
	}{
		{"go-redis", func(b *testing.B) (limiter.Store, func() BatchStats) {
			client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
			r := NewRedis(client, nil, RedisOptions{CloseClient: true, Batches: 2})
			b.Cleanup(func() { _ = r.Close() })
			return r, r.BatchStats
		}},
		{"rueidis", func(b *testing.B) (limiter.Store, func() BatchStats) {
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true,
				DisableCache: true, MaxFlushDelay: 20 * time.Microsecond})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(client.Close)
			bt := newBatcher(rueidisSend(client), batchOptions{Slots: 2, MaxOps: 4 * maxCallOps, Timeout: time.Second})
			return batchStore{bt}, bt.Stats
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			st, stats := c.open(b)
			const keys = 100_000
			ops := make([]limiter.Op, keys)
			prefix := fmt.Sprintf("clients:%d:", time.Now().UnixNano())
			for i := range ops {
				ops[i] = limiter.Op{Key: prefix + "{" + strconv.Itoa(i) + "}:", Algorithm: descriptors.FixedWindow,
					Limit: 1 << 40, Window: 60_000, Cost: 1000}
			}
			if err := st.Take(ctx, ops[:1], make([]limiter.Result, 1)); err != nil {
				b.Fatal(err)
			}
			before, redisBefore, s0 := cpuTime(), redistest.CPU(b, addr), stats()
			b.ReportAllocs()
			b.SetParallelism(64 / max(1, runtimeProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				res := make([]limiter.Result, 1)
				for pb.Next() {
					i := rng.IntN(keys)
					if err := st.Take(ctx, ops[i:i+1], res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(cpuTime()-before)/n/1e3, "cpu-us/op")
			b.ReportMetric((redistest.CPU(b, addr)-redisBefore).Seconds()*1e6/n, "redis-us/op")
			s1 := stats()
			if calls := s1.Sends - s0.Sends; calls > 0 {
				b.ReportMetric(float64(s1.Ops-s0.Ops)/float64(calls), "ops/call")
			}
		})
	}
}

// batchStore is a limiter.Store over a batcher, for the comparison.
type batchStore struct{ b *batcher }

func (s batchStore) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	return s.b.take(ctx, ops, results)
}
func (batchStore) Ping(context.Context) error { return nil }
func (batchStore) Close() error               { return nil }

// rueidisSend sends ops as take.lua calls through rueidis.
func rueidisSend(c rueidis.Client) sendFunc {
	return func(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
		var chunks [maxSendChunks]takeChunk
		calls := splitChunks(ops, chunks[:0])
		cmds := make(rueidis.Commands, len(calls))
		args := make([]strArgs, len(calls))
		scripts := make([]*script, len(calls))
		for i := range calls {
			ch := &calls[i]
			ch.tag = nextTag()
			var enc takeEncoder
			enc.plan(ops[ch.from:ch.to], takeScript)
			enc.write(&args[i], ch.tag, ops[ch.from:ch.to])
			scripts[i] = enc.script
			cmds[i] = c.B().Arbitrary("EVALSHA", scripts[i].sha).Args(args[i]...).Build()
		}
		for i, r := range c.DoMulti(ctx, cmds...) {
			if r.Error() != nil && strings.HasPrefix(r.Error().Error(), "NOSCRIPT") {
				r = c.Do(ctx, c.B().Arbitrary("EVAL", scripts[i].src).Args(args[i]...).Build())
			}
			from, to := calls[i].from, calls[i].to
			var v []int64
			var err error
			if scripts[i] == fixedScript && to-from == 1 {
				var one [4]int64
				var s string
				if s, err = r.ToString(); err == nil {
					v, err = parseFixedOne(s, &one)
				}
			} else {
				v, err = r.AsIntSlice()
			}
			if err == nil {
				err = decodeReply(scripts[i], v, calls[i].tag, ops[from:to], results[from:to], nil)
			}
			if err != nil {
				return unavailable("take", err)
			}
		}
		return nil
	}
}

// strArgs collects arguments as strings, for rueidis.
type strArgs []string

func (a *strArgs) String(s string) { *a = append(*a, s) }
func (a *strArgs) Bytes(p []byte)  { *a = append(*a, string(p)) }
func (a *strArgs) Int(v int64)     { *a = append(*a, strconv.FormatInt(v, 10)) }

// cpuTime is the process's user and system CPU time, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
