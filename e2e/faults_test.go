package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// The network fault tests run the real binary with its default flags
// (--store-timeout 50ms, the circuit breaker, --on-store-error error)
// against a real redis-server behind a fault-injecting proxy, and check
// what issue 11 asks of them: every answer carries its own key's count,
// Redis counts no more than it should, few calls fail, the breaker does
// not open on a burst, and the server comes back by itself.

const (
	faultLimit = 4_000_000_000
	faultSpan  = 10_000_000 // requests: caller c's counter starts at c x span
)

// faultServer is the binary behind a proxy to a Redis of its own, and a
// client straight to that Redis.
type faultServer struct {
	*fastlimit
	admin string
	proxy *faultproxy.Proxy
	rdb   *redis.Client
	keys  []string // each caller's counter
}

func startFaultServer(t *testing.T, callers int, extra ...string) *faultServer {
	t.Helper()
	r := redistest.StartServer(t)
	p := faultproxy.New(t, r.Addr)
	admin := loopback.Addr(t)
	args := append([]string{"--redis-url", "redis://" + p.Addr() + "/1", "--store-timeout", "50ms", "--admin-addr", admin}, extra...)
	f := &faultServer{fastlimit: startServer(t, files.Dir(t, map[string]string{"faults.yaml": faultRules}), true, args...),
		admin: admin, proxy: p, rdb: redis.NewClient(&redis.Options{Addr: r.Addr, DB: 1})}
	t.Cleanup(func() { _ = f.rdb.Close() })
	// One hit per caller creates its counter; then each starts at c x span.
	ctx := ctxTimeout(t, 30*time.Second)
	for c := range callers {
		// Setup, not measurement: the first hit also dials Redis through
		// the proxy, which may take past --store-timeout on a busy box.
		var err error
		_ = wait.Until(ctx, 30*time.Second, func() error {
			_, err = f.Client.ShouldRateLimit(ctx, domainRequest("faults", fmt.Sprintf("c%d", c), "caller"))
			if status.Code(err) == codes.Unavailable {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatalf("caller %d's first hit: %v", c, err)
		}
		keys, err := f.rdb.Keys(ctx, fmt.Sprintf("*caller=c%d}*", c)).Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("caller %d's counter: %v %v", c, keys, err)
		}
		if err := f.rdb.Set(ctx, keys[0], int64(c)*faultSpan*1000, redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
		f.keys = append(f.keys, keys[0])
	}
	return f
}

// run sends each caller's hits back to back (or one every pace), with
// Envoy's 1 s timeout, while during runs and for d after it
// (faultproxy.RunLoad).
func (f *faultServer) run(t *testing.T, d, pace time.Duration, during func(*faultproxy.Load)) *faultproxy.Load {
	t.Helper()
	return faultproxy.RunLoad(len(f.keys), d, pace, faultSpan, func(c int) (int64, bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := f.Client.ShouldRateLimit(ctx, domainRequest("faults", fmt.Sprintf("c%d", c), "caller"))
		if err != nil {
			return 0, false, err
		}
		count := faultLimit - int64(resp.GetStatuses()[0].GetLimitRemaining())
		return count, resp.GetOverallCode() == rls.RateLimitResponse_OK, nil
	}, func(err error) string { return status.Convert(err).Message() }, during)
}

// counted returns the hits Redis counted since the counters were set.
func (f *faultServer) counted(t *testing.T) int64 {
	t.Helper()
	var n int64
	for c, k := range f.keys {
		v, err := f.rdb.Get(context.Background(), k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		n += v/1000 - int64(c)*faultSpan
	}
	return n
}

// check fails t if an answer carried another caller's count, or Redis
// counted fewer hits than OK answers or more than maxLost beyond them.
func (f *faultServer) check(t *testing.T, res *faultproxy.Load, maxLost int64) {
	t.Helper()
	f.checkAll(t, maxLost, res)
}

// checkAll is check of loads run one after the other on the same counters.
func (f *faultServer) checkAll(t *testing.T, maxLost int64, loads ...*faultproxy.Load) {
	t.Helper()
	var ok int64
	for _, res := range loads {
		if w := res.Wrong.Load(); w != 0 {
			t.Errorf("%d answers carried a count that is not their caller's: %v", w, res.FirstWrong())
		}
		ok += res.OK.Load()
	}
	counted := f.counted(t)
	if counted < ok || counted-ok > maxLost {
		t.Errorf("Redis counted %d hits for %d OK answers; want between %d and %d", counted, ok, ok, ok+maxLost)
	}
}

// resetCounters sets each caller's counter back to its start.
func (f *faultServer) resetCounters(t *testing.T) {
	t.Helper()
	for c, k := range f.keys {
		if err := f.rdb.Set(context.Background(), k, int64(c)*faultSpan*1000, redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitLoad waits until cond holds of the load running beside (30 s at
// most, or it fails t): faults come once the load has made some calls,
// and last some number of calls.
func awaitLoad(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !wait.True(30*time.Second, cond) {
		t.Fatalf("the load did not reach %s within 30 s", what)
	}
}

// breakerOpenings counts the times the server logged its breaker opening.
func (f *faultServer) breakerOpenings() int {
	return strings.Count(f.logs.String(), `"to": "open"`)
}

// TestNetworkFaults runs issue 11's faults against the default store path
// (a single Redis).
func TestNetworkFaults(t *testing.T) {
	for _, path := range []struct {
		name  string
		flags []string
	}{{"single", nil}} {
		t.Run(path.name, func(t *testing.T) {
			t.Run("drops", func(t *testing.T) {
				// 5 single connection drops, 1,000 calls OK apart, at 32
				// callers: at most 2 % of the calls fail, and the breaker
				// stays closed.
				f := startFaultServer(t, 32, path.flags...)
				res := f.run(t, 500*time.Millisecond, 0, func(l *faultproxy.Load) {
					for range 5 {
						ok := l.OK.Load()
						awaitLoad(t, "1,000 more calls OK", func() bool { return l.OK.Load() >= ok+1000 })
						<-f.proxy.Add(&faultproxy.DropMidReply{Match: faultproxy.Nth(1, "EVALSHA", "EVAL"), After: 5}).Done()
					}
				})
				t.Logf("%v; breaker opened %d times", res, f.breakerOpenings())
				if total := res.OK.Load() + res.Failed.Load(); res.Failed.Load()*50 > total {
					t.Errorf("%d of %d calls failed over 5 drops, want at most 2 %%", res.Failed.Load(), total)
				}
				if n := f.breakerOpenings(); n != 0 {
					t.Errorf("the breaker opened %d times on single connection drops", n)
				}
				f.check(t, res, res.Failed.Load())
				// 32 callers at once share script calls.
				m := scrape.Series(t, metricsPage(t, f.admin))
				batches, ops := m["fastlimit_redis_batches_total"], m["fastlimit_redis_batched_ops_total"]
				t.Logf("%.0f decisions in %.0f batches (%.1f a batch)", ops, batches, ops/batches)
				if batches == 0 || ops < 2*batches {
					t.Errorf("%.0f decisions in %.0f batches: concurrent requests did not share script calls", ops, batches)
				}
			})
			t.Run("extra reply", func(t *testing.T) {
				// One unsolicited reply, shaped like a script's: no answer
				// may carry another key's count.
				f := startFaultServer(t, 32, path.flags...)
				for _, before := range []bool{true, false} {
					res := f.run(t, 1500*time.Millisecond, 0, func(l *faultproxy.Load) {
						awaitLoad(t, "100 calls OK", func() bool { return l.OK.Load() >= 100 })
						<-f.proxy.Add(&faultproxy.ExtraReply{Match: faultproxy.Nth(1, "EVALSHA"), Before: before,
							Reply: faultproxy.Ints(1, 0, 7_000_000_000)}).Done()
					})
					t.Logf("before the reply %t: %v", before, res)
					f.check(t, res, res.Failed.Load())
					f.resetCounters(t)
				}
			})
			t.Run("held replies", func(t *testing.T) {
				// Replies held while 40 calls a caller fail (2 s at
				// --store-timeout 50ms): Redis counts at most the OK answers
				// plus 2 % of the failed calls.
				f := startFaultServer(t, 32, path.flags...)
				res := f.run(t, 500*time.Millisecond, 0, func(l *faultproxy.Load) {
					awaitLoad(t, "100 calls OK", func() bool { return l.OK.Load() >= 100 })
					rule := f.proxy.Add(&faultproxy.Freeze{})
					failed := l.Failed.Load()
					awaitLoad(t, "40 failed calls a caller", func() bool { return l.Failed.Load() >= failed+40*32 })
					rule.Release()
				})
				t.Logf("%v; counted %d", res, f.counted(t))
				f.check(t, res, res.Failed.Load()/50)
			})
			t.Run("slow handshake", func(t *testing.T) {
				// SELECT db 1 answered 80 ms late on every new connection,
				// and every connection cut: in the second that follows 3 s
				// of load from the cut, the server decides by itself as well
				// as it did without the fault on this machine, as loaded as
				// it is, just before. (Beside a busy loop at a load of 15,
				// one run in five failed every call of the 3 s, all at the
				// 50 ms timeout, then recovered.)
				// The breaker is left out: on a busy machine calls time out
				// at 50 ms with or without the fault, and five in a row open
				// it (TestBreaker covers that), after which calls fail at once
				// and the shares below would measure the CPU, not the store.
				f := startFaultServer(t, 32, append([]string{"--breaker-failures", "1000000"}, path.flags...)...)
				base := f.run(t, time.Second, 0, nil)
				baseOK, baseTotal := base.OK.Load(), base.OK.Load()+base.Failed.Load()
				if baseOK == 0 {
					t.Fatalf("without the fault, no call was OK (%v): the bound below would hold whatever happens", base)
				}
				f.resetCounters(t)
				f.proxy.Add(&faultproxy.SlowHandshake{First: 1, Delay: 80 * time.Millisecond})
				f.proxy.CutAll(0)
				cut := f.run(t, 3*time.Second, 0, nil)
				after := f.run(t, time.Second, 0, nil)
				t.Logf("without the fault: %v; 3 s from the cut: %v; the second after: %v; breaker opened %d times",
					base, cut, after, f.breakerOpenings())
				if ok, total := after.OK.Load(), after.OK.Load()+after.Failed.Load(); ok*10*baseTotal < total*9*baseOK {
					t.Errorf("%d of %d calls OK in the second after the 3 s from the cut, want at least 90 %% of the %d of %d OK without the fault",
						ok, total, baseOK, baseTotal)
				}
				// A call written in time whose reply came after its caller's
				// 50 ms ran: it may be counted, though its caller was
				// answered Unavailable. Whether a call that waited for a
				// slow connection is written once it is ready (issue 19) is
				// the next subtest's question, asked without a race.
				f.checkAll(t, cut.Failed.Load()+after.Failed.Load(), cut, after)
			})
			t.Run("dial wait", func(t *testing.T) {
				// Every new connection's handshake answers after 300 ms, six
				// times the store timeout; then every connection is cut. A
				// request waits for a new connection and is answered
				// Unavailable at 50 ms, long before it is ready: nothing of it
				// may be written once it is (issue 19: 406 of 582 such
				// requests were charged).
				f := startFaultServer(t, 1, path.flags...)
				f.proxy.Add(&faultproxy.SlowHandshake{Match: faultproxy.Match{Commands: []string{"HELLO", "AUTH", "SELECT", "CLIENT", "READONLY"}},
					First: 5, Delay: 300 * time.Millisecond})
				f.proxy.CutAll(0)
				ctx := ctxTimeout(t, 30*time.Second)
				for range 3 {
					resp, err := f.Client.ShouldRateLimit(ctx, domainRequest("faults", "dialwait", "caller"))
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("a request while every handshake took 300 ms: %v %v, want Unavailable", resp, err)
					}
				}
				// Every handshake is over and the server decides again: by
				// then a request kept for a slow connection would have been
				// written.
				wait.For(t, 30*time.Second, func() bool { return f.proxy.Stats().Holding == 0 })
				wait.For(t, 30*time.Second, func() bool {
					_, err := f.Client.ShouldRateLimit(ctx, domainRequest("faults", "c0", "caller"))
					return err == nil
				})
				keys, err := f.rdb.Keys(ctx, "*caller=dialwait}*").Result()
				if err != nil || len(keys) != 0 {
					t.Errorf("counters %v (%v): requests answered Unavailable were written once their connection was ready", keys, err)
				}
			})
			t.Run("stalls", func(t *testing.T) {
				// Five 80 ms stalls of Redis at 500 requests a second fail
				// at most the calls in flight during them: those sent from
				// 50 ms (--store-timeout) before a stall to its end, 130 ms
				// of 500 calls a second, five times (325). Beside a busy CPU
				// loop, 164 of 2,500 failed (5 % was the bound before).
				f := startFaultServer(t, 25, path.flags...)
				res := f.run(t, time.Second, 50*time.Millisecond, func(l *faultproxy.Load) {
					for range 5 { // 350 calls OK (0.7 s) apart; a timer ends each stall
						ok := l.OK.Load()
						awaitLoad(t, "350 more calls OK", func() bool { return l.OK.Load() >= ok+350 })
						r := f.proxy.Add(&faultproxy.Freeze{Requests: true})
						time.AfterFunc(80*time.Millisecond, r.Release)
						<-r.Done()
					}
				})
				t.Logf("%v; breaker opened %d times", res, f.breakerOpenings())
				if failed, inFlight := res.Failed.Load(), int64(5*130*500/1000); failed > inFlight {
					t.Errorf("%d of %d calls failed over five 80 ms stalls, want at most the %d in flight during them",
						failed, res.OK.Load()+failed, inFlight)
				}
				f.check(t, res, res.Failed.Load())
			})
		})
	}
}
