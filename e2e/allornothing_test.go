package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// remaining peeks at one descriptor (hits_addend 0) and returns its
// limit_remaining and code.
func remaining(t *testing.T, c rls.RateLimitServiceClient, domain, id, key string) (uint32, rls.RateLimitResponse_Code) {
	t.Helper()
	d := desc(key, id)
	d.HitsAddend = wrapperspb.UInt64(0)
	resp, err := c.ShouldRateLimit(ctxTimeout(t, 10*time.Second), &rls.RateLimitRequest{Domain: domain, Descriptors: []*common.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Statuses[0].LimitRemaining, resp.Statuses[0].Code
}

func codesOf(resp *rls.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.OverallCode.String())
	for _, st := range resp.Statuses {
		b.WriteString(" " + st.Code.String())
	}
	return b.String()
}

// TestAllOrNothingDomain: in an all-or-nothing domain a request with a descriptor over
// its limit charges nothing, while a plain domain keeps counting the
// other descriptors (and the fixed window's denied hit), as
// envoyproxy/ratelimit does. With --atomic every domain is all or nothing.
func TestAllOrNothingDomain(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		for _, flag := range []bool{false, true} {
			name := "per domain"
			args := extra
			if flag {
				name, args = "--atomic", append(append([]string{}, extra...), "--atomic")
			}
			t.Run(name, func(t *testing.T) {
				srv := startServer(t, "testdata/allornothing", true, args...)
				ctx := ctxTimeout(t, 30*time.Second)
				id := fmt.Sprint(time.Now().UnixNano())
				for _, domain := range []string{"all", "plain"} {
					allOrNothing := domain == "all" || flag
					keys := []string{"a", "sw", "tb", "one", "free"}
					var resps []*rls.RateLimitResponse
					for range 2 {
						resp, err := srv.Client.ShouldRateLimit(ctx, domainRequest(domain, id, keys...))
						if err != nil {
							t.Fatal(err)
						}
						resps = append(resps, resp)
					}
					if got := codesOf(resps[0]); got != "OK OK OK OK OK OK" {
						t.Errorf("%s first request: %s", domain, got)
					}
					if got := codesOf(resps[1]); got != "OVER_LIMIT OK OK OK OVER_LIMIT OK" {
						t.Errorf("%s second request: %s", domain, got)
					}
					// The second request reports what a commit would have left.
					if r := resps[1].Statuses[0].LimitRemaining; r != 3 {
						t.Errorf("%s second request: a reports %d left, want 3", domain, r)
					}
					wantLeft, wantOne := uint32(3), rls.RateLimitResponse_OVER_LIMIT
					if allOrNothing {
						wantLeft, wantOne = 4, rls.RateLimitResponse_OK
					}
					for _, k := range []string{"a", "sw", "tb"} {
						if left, _ := remaining(t, srv.Client, domain, id, k); left != wantLeft {
							t.Errorf("%s (allOrNothing %v): %s has %d left, want %d", domain, allOrNothing, k, left, wantLeft)
						}
					}
					if _, code := remaining(t, srv.Client, domain, id, "one"); code != wantOne {
						t.Errorf("%s (allOrNothing %v): peek of the used-up fixed window = %v, want %v", domain, allOrNothing, code, wantOne)
					}
				}
			})
		}
	})
}

// TestAllOrNothingRedisKeys: an all-or-nothing domain's keys carry the domain as their
// hash tag, and the rejected request's fixed-window hit is not in Redis.
func TestAllOrNothingRedisKeys(t *testing.T) {
	r := redistest.StartServer(t)
	srv := startServer(t, "testdata/allornothing", true, "--redis-url", "redis://"+r.Addr+"/0")
	ctx := ctxTimeout(t, 30*time.Second)
	id := fmt.Sprint(time.Now().UnixNano())
	for range 2 {
		if _, err := srv.Client.ShouldRateLimit(ctx, domainRequest("all", id, "a", "one")); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "ratelimit:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("keys %v, want a's and one's counters", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "ratelimit:{all}/") {
			t.Errorf("key %q is not tagged by its domain", k)
		}
		v, err := rdb.Get(ctx, k).Result()
		if err != nil || v != "1000" {
			t.Errorf("%s = %q, %v; want 1000 (one hit of the first request)", k, v, err)
		}
	}
}

// TestAllOrNothingCluster: on a Redis Cluster an all-or-nothing domain's request is one
// script call on the domain's shard, whatever slots its plain keys would
// have.
func TestAllOrNothingCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a six-node Redis Cluster")
	}
	c := redistest.StartCluster(t)
	srv := startServer(t, "testdata/allornothing", true, "--redis-type", "cluster", "--redis-url", c.Seeds())
	ctx := ctxTimeout(t, 30*time.Second)
	id := fmt.Sprint(time.Now().UnixNano())
	keys := []string{"a", "sw", "tb", "one", "free"}
	want := []string{"OK OK OK OK OK OK", "OVER_LIMIT OK OK OK OVER_LIMIT OK"}
	for _, domain := range []string{"all", "plain"} {
		for i := range 2 {
			resp, err := srv.Client.ShouldRateLimit(ctx, domainRequest(domain, id, keys...))
			if err != nil {
				t.Fatalf("%s request %d: %v", domain, i, err)
			}
			if got := codesOf(resp); got != want[i] {
				t.Errorf("%s request %d: %s, want %s", domain, i, got, want[i])
			}
		}
	}
	if left, _ := remaining(t, srv.Client, "all", id, "a"); left != 4 {
		t.Errorf("all: a has %d left, want 4", left)
	}
	if left, _ := remaining(t, srv.Client, "plain", id, "a"); left != 3 {
		t.Errorf("plain: a has %d left, want 3", left)
	}
}
