package e2e_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
)

// TestRedisOutOfMemory: a Redis at maxmemory 1 with noeviction answers
// PING but fails every script call (OOM). Under load, every answer follows
// --on-store-error (deny: OVER_LIMIT), and the breaker opens once and
// stays open: its probes are script calls, not PINGs, so it does not flap
// open and closed each cooldown (issue 19: twice a second before). Once
// Redis has memory again, the breaker closes within a few cooldowns and
// requests are decided again.
func TestRedisOutOfMemory(t *testing.T) {
	r := startRedis(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
	admin := loopback(t)
	rules := "domain: e2e\ndescriptors:\n  - key: big\n    rate_limit: {unit: day, requests_per_unit: 1000000000}\n"
	srv := startServer(t, writeRules(t, map[string]string{"e2e.yaml": rules}), true,
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
				for time.Now().Before(end) {
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
					time.Sleep(5 * time.Millisecond)
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
	waitFor(t, 10*time.Second, func() bool {
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
