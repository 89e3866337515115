package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestBreakerRecoversWithoutTraffic kills Redis until the circuit breaker
// opens, brings it back and sends nothing for 2 s: the breaker's own
// probes close the circuit, and a burst of 300 on a limit of 100 admits
// exactly 100, whatever --on-store-error says.
func TestBreakerRecoversWithoutTraffic(t *testing.T) {
	for _, policy := range []string{"allow", "deny", "error"} {
		t.Run(policy, func(t *testing.T) {
			r := redistest.StartServer(t)
			admin := loopback.Addr(t)
			srv := startServer(t, files.Dir(t, map[string]string{"brk.yaml": breakerRules}), true,
				// A generous timeout: on a loaded machine no call of the burst
				// may fall to the policy.
				"--redis-url", "redis://"+r.Addr+"/0", "--store-timeout", "1s",
				"--on-store-error", policy, "--admin-addr", admin)
			state := func() float64 { return scrape.Value(t, metricsPage(t, admin), "fastlimit_store_breaker_state") }
			id := fmt.Sprint(time.Now().UnixNano())
			if _, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest("brk", "warm", "k")); err != nil {
				t.Fatal(err)
			}

			r.Stop()
			// One call after another: independent failures open it.
			wait.For(t, 10*time.Second, func() bool {
				_, _ = srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest("brk", "down", "k"))
				return state() != 0
			})
			r.Restart(t)
			// No traffic: the breaker's own probes close it.
			if !wait.True(10*time.Second, func() bool { return state() == 0 }) {
				t.Fatalf("breaker state %v 10 s after Redis came back, with no traffic", state())
			}

			got := burst([]*fastlimit{srv}, 300, 10*time.Second, domainRequest("brk", id, "k"))
			if got.ok != 100 || got.over != 200 {
				t.Fatalf("burst of 300 on a limit of 100: %v", got)
			}
		})
	}
}

// TestRedisOutOfMemory: a Redis at maxmemory 1 with noeviction answers
// PING but fails every script call (OOM). Under load, every answer follows
// --on-store-error (deny: OVER_LIMIT), and the breaker opens once and
// stays open: its probes are script calls, not PINGs, so it does not flap
// open and closed each cooldown (issue 19: twice a second before). Once
// Redis has memory again, the breaker closes within a few cooldowns and
// requests are decided again.
func TestRedisOutOfMemory(t *testing.T) {
	r := redistest.StartServer(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
	admin := loopback.Addr(t)
	rules := oneRule("e2e", "big", "day", 1_000_000_000)
	srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": rules}), true,
		"--redis-url", "redis://"+r.Addr, "--on-store-error", "deny", "--breaker-cooldown", "200ms",
		"--store-timeout", "500ms", "--admin-addr", admin)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { _ = rdb.Close() })

	// load sends requests from 4 callers for d and returns the answers'
	// codes, counted.
	load := func(d time.Duration) map[string]int {
		var mu sync.Mutex
		codes := map[string]int{}
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for range 4 {
			wg.Go(func() {
				pace := time.NewTicker(5 * time.Millisecond)
				defer pace.Stop()
				for ; time.Now().Before(end); <-pace.C {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					resp, err := srv.Client.ShouldRateLimit(ctx, request(desc("big", "oom")))
					cancel()
					code := resp.GetOverallCode().String()
					if err != nil {
						code = err.Error()
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return codes
	}
	changes := func() (opened, closed int) {
		logs := srv.logs.String()
		return strings.Count(logs, `"to": "open"`), strings.Count(logs, `"to": "closed"`)
	}

	codes := load(3 * time.Second)
	t.Logf("out of memory: %v", codes)
	if n := codes[rls.RateLimitResponse_OVER_LIMIT.String()]; n == 0 || len(codes) != 1 {
		t.Errorf("answers with Redis out of memory and --on-store-error deny: %v, want OVER_LIMIT only", codes)
	}
	if opened, closed := changes(); opened != 1 || closed != 0 {
		t.Errorf("breaker opened %d and closed %d times over 3 s of a Redis that fails every script, want open once", opened, closed)
	}

	if err := rdb.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() bool {
		_, closed := changes()
		return closed == 1
	})
	codes = load(time.Second)
	t.Logf("memory again: %v", codes)
	if n := codes[rls.RateLimitResponse_OK.String()]; n == 0 || len(codes) != 1 {
		t.Errorf("answers once Redis has memory again: %v, want OK only", codes)
	}
	if opened, closed := changes(); opened != 1 || closed != 1 {
		t.Errorf("breaker opened %d and closed %d times, want once each", opened, closed)
	}
}
