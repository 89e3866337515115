package e2e_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const breakerRules = `
domain: brk
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// TestBreakerRecoversWithoutTraffic kills Redis until the circuit breaker
// opens, brings it back and sends nothing for 2 s: the breaker's own
// probes close the circuit, and a burst of 300 on a limit of 100 admits
// exactly 100, whatever --on-store-error says.
func TestBreakerRecoversWithoutTraffic(t *testing.T) {
	for _, policy := range []string{"allow", "deny", "error"} {
		t.Run(policy, func(t *testing.T) {
			r := startRedis(t)
			admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			srv := startServer(t, writeRules(t, map[string]string{"brk.yaml": breakerRules}), true,
				// A generous timeout: on a loaded machine no call of the burst
				// may fall to the policy.
				"--redis-url", "redis://"+r.Addr+"/0", "--store-timeout", "1s",
				"--on-store-error", policy, "--admin-addr", admin)
			state := func() float64 { return metricValue(t, scrape(t, admin), "fastlimit_store_breaker_state") }
			id := fmt.Sprint(time.Now().UnixNano())
			if _, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest("brk", "warm", "k")); err != nil {
				t.Fatal(err)
			}

			r.Stop()
			// One call after another: independent failures open it.
			waitFor(t, 10*time.Second, func() bool {
				_, _ = srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest("brk", "down", "k"))
				return state() != 0
			})
			r.Restart(t)
			time.Sleep(2 * time.Second) // no traffic
			if s := state(); s != 0 {
				t.Fatalf("breaker state %v 2 s after Redis came back", s)
			}

			var ok, over, failed atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 300 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					resp, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), domainRequest("brk", id, "k"))
					switch {
					case err != nil:
						failed.Add(1)
					case resp.OverallCode == rls.RateLimitResponse_OK:
						ok.Add(1)
					default:
						over.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if ok.Load() != 100 || over.Load() != 200 {
				t.Fatalf("burst of 300 on a limit of 100: %d OK, %d OVER_LIMIT, %d errors", ok.Load(), over.Load(), failed.Load())
			}
		})
	}
}
