package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// planRules are 10 a second and 1,000 a day on one key (the issue's), and
// 10 a second and 15 a day, whose day a test fills in two seconds.
const planRules = `
domain: plans
descriptors:
  - key: account
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {name: daily, unit: day, requests_per_unit: 1000}
  - key: small
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {name: daily, unit: day, requests_per_unit: 15}
`

// TestSeveralLimits runs the binary on the embedded store, one Redis and
// a Redis Cluster: with 10 a second and 1,000 a day, ten requests in a
// second pass, the eleventh is OVER_LIMIT by the second and charges
// neither limit; once the day is used up (15 of them, over two seconds),
// the day denies though the second allows, and charges neither. The
// headers name both limits, /v1/usage shows both.
func TestSeveralLimits(t *testing.T) {
	run := func(t *testing.T, extra ...string) {
		srv, admin := startOps(t, files.Dir(t, map[string]string{"plans.yaml": planRules}),
			append(extra, "--response-headers", "ietf", "--store-timeout", "5s")...)
		ctx := ctxTimeout(t, time.Minute)
		call := func(key, id string) *rls.RateLimitResponse {
			t.Helper()
			resp, err := srv.Client.ShouldRateLimit(ctx, requestIn("plans", desc(key, id)))
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		usage := func(key, id string) (second, day uint32) {
			t.Helper()
			code, body := scrape.Get(t, "http://"+admin+"/v1/usage?domain=plans&descriptor="+key+"="+id)
			var u struct {
				Limits []struct {
					Rule      string  `json:"rule"`
					Remaining *uint32 `json:"remaining"`
				} `json:"limits"`
			}
			if err := json.Unmarshal([]byte(body), &u); code != http.StatusOK || err != nil || len(u.Limits) != 2 ||
				u.Limits[0].Remaining == nil || u.Limits[1].Remaining == nil {
				t.Fatalf("/v1/usage: %d %v %s", code, err, body)
			}
			return *u.Limits[0].Remaining, *u.Limits[1].Remaining
		}

		// Ten pass and the eleventh is denied within one second: start on
		// a second, and try again if the machine was too slow for it.
		for attempt := 1; ; attempt++ {
			id := fmt.Sprint(time.Now().UnixNano())
			nextWindow(time.Second, 20*time.Millisecond)
			start := time.Now()
			var resps []*rls.RateLimitResponse
			for range 11 {
				resps = append(resps, call("account", id))
			}
			second, day := usage("account", id)
			if time.Since(start) > 800*time.Millisecond && attempt < 3 {
				t.Logf("attempt %d took %v, past its second; again", attempt, time.Since(start))
				continue
			}
			for i, r := range resps[:10] {
				if r.OverallCode != rls.RateLimitResponse_OK {
					t.Fatalf("request %d of 10: %v", i+1, r.OverallCode)
				}
			}
			last := resps[10]
			if st := last.Statuses[0]; last.OverallCode != rls.RateLimitResponse_OVER_LIMIT ||
				st.CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_SECOND || st.CurrentLimit.GetRequestsPerUnit() != 10 {
				t.Fatalf("the 11th: %v %v, want OVER_LIMIT by 10 a second", last.OverallCode, st)
			}
			if second != 0 || day != 990 {
				t.Errorf("after 10 passed and the 11th was denied: %d left in the second, %d in the day; want 0 and 990", second, day)
			}
			headers := map[string]string{}
			for _, h := range last.ResponseHeadersToAdd {
				headers[h.GetKey()] = h.GetValue()
			}
			if p := headers["RateLimit-Policy"]; !strings.Contains(p, `"plans.account#0";q=10;w=1`) || !strings.Contains(p, `"daily";q=1000;w=86400`) {
				t.Errorf("RateLimit-Policy %q, want both limits", p)
			}
			break
		}

		// 10 a second and 15 a day: 10 now, 5 a second later, then the
		// day denies though the second has 5 left, charging neither.
		id := fmt.Sprint(time.Now().UnixNano())
		nextWindow(time.Second, 20*time.Millisecond)
		for range 10 {
			call("small", id)
		}
		// The second's window rolls over: its 10 are back, the day's 5 are not.
		wait.For(t, 10*time.Second, func() bool { second, _ := usage("small", id); return second == 10 })
		for i := range 5 {
			if r := call("small", id); r.OverallCode != rls.RateLimitResponse_OK {
				t.Fatalf("request %d of the second second: %v", i+1, r.OverallCode)
			}
		}
		r := call("small", id)
		if st := r.Statuses[0]; r.OverallCode != rls.RateLimitResponse_OVER_LIMIT ||
			st.CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_DAY || st.CurrentLimit.GetName() != "daily" {
			t.Fatalf("the 16th of the day: %v %v, want OVER_LIMIT by the day", r.OverallCode, st)
		}
		// The second may have rolled over since (10 left), but never
		// counts the denial: 5 left in the same second.
		if second, day := usage("small", id); day != 0 || second != 5 && second != 10 {
			t.Errorf("after the day's denial: %d left in the second, %d in the day; want 5 (or 10 in the next second) and 0", second, day)
		}
	}
	t.Run("memory", func(t *testing.T) { run(t) })
	t.Run("redis", func(t *testing.T) {
		r := redistest.StartServer(t)
		run(t, "--redis-url", "redis://"+r.Addr+"/0")
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		run(t, "--redis-type", "CLUSTER", "--redis-url", c.Seeds())
	})
}
