package e2e_test

import (
	"fmt"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

func cacheRequest(key, value string, override uint32) *rls.RateLimitRequest {
	d := &common.RateLimitDescriptor{Entries: []*common.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
	if override > 0 {
		d.Limit = &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: override, Unit: typev3.RateLimitUnit_MINUTE}
	}
	return requestIn("cache", d)
}

// TestLocalCache runs the server with --over-limit-cache-bytes: once
// Redis denies a key, the server denies it without asking Redis until
// Redis said it could pass; a request's limit override still goes to
// Redis; known-over keys stay denied while Redis is down.
func TestLocalCache(t *testing.T) {
	redis := redistest.StartServer(t)
	admin := loopback.Addr(t)
	srv := startServer(t, files.Dir(t, map[string]string{"cache.yaml": cacheRules}), true,
		"--redis-url", "redis://"+redis.Addr, "--over-limit-cache-bytes", "1048576", "--admin-addr", admin,
		"--breaker-failures", "1000")
	ctx := ctxTimeout(t, 60*time.Second)
	id := fmt.Sprint(time.Now().UnixNano())
	decide := func(req *rls.RateLimitRequest) *rls.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := srv.Client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0]
	}

	hits := 0.0
	for _, key := range []string{"fixed", "sliding", "bucket"} {
		for i := range 3 {
			if st := decide(cacheRequest(key, id, 0)); st.Code != rls.RateLimitResponse_OK {
				t.Fatalf("%s hit %d = %v, want OK", key, i+1, st.Code)
			}
		}
		// The first denial comes from Redis, the next ones from the cache.
		for i := range 5 {
			st := decide(cacheRequest(key, id, 0))
			if st.Code != rls.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() <= 0 {
				t.Fatalf("%s over hit %d = %v", key, i+1, st)
			}
		}
		hits += 4
		if got := scrape.Value(t, metricsPage(t, admin), "fastlimit_local_cache_hits_total"); got != hits {
			t.Errorf("after %s: cache hits = %v, want %v", key, got, hits)
		}
		// An override of the limit is Redis' to decide, not the cache's.
		if st := decide(cacheRequest(key, id, 100)); st.Code != rls.RateLimitResponse_OK {
			t.Errorf("%s with a limit override of 100/min = %v, want OK from Redis", key, st)
		}
		if got := scrape.Value(t, metricsPage(t, admin), "fastlimit_local_cache_hits_total"); got != hits {
			t.Errorf("%s: the override was answered by the cache (hits %v, want %v)", key, got, hits)
		}
	}

	// A denial is held no longer than Redis holds it: a 2/s key passes
	// again as soon as its window is over.
	for range 2 {
		decide(cacheRequest("second", id, 0))
	}
	st := decide(cacheRequest("second", id, 0))
	if st.Code != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("third hit of a 2/s key = %v", st.Code)
	}
	denied, reset := time.Now(), st.DurationUntilReset.AsDuration()
	if !wait.True(10*time.Second, func() bool { return decide(cacheRequest("second", id, 0)).Code == rls.RateLimitResponse_OK }) {
		t.Fatalf("the key was still denied 10 s after its window (%v) ended", reset)
	}
	if took := time.Since(denied); took > reset+time.Second {
		t.Errorf("denied %v after the denial, past its window's end (%v) by more than a second", took, reset)
	}

	// Redis away: known-over keys are still denied, others get the
	// --on-store-error answer (Unavailable by default).
	for range 4 {
		decide(cacheRequest("fixed", id+"-down", 0))
	}
	redis.Stop()
	if st := decide(cacheRequest("fixed", id+"-down", 0)); st.Code != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("known-over key with Redis down = %v, want OVER_LIMIT from the cache", st.Code)
	}
	_, err := srv.Client.ShouldRateLimit(ctx, cacheRequest("fixed", id+"-new", 0))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("new key with Redis down = %v, want Unavailable", err)
	}
	if got := scrape.Value(t, metricsPage(t, admin), "fastlimit_local_cache_entries"); got < 1 {
		t.Errorf("cache entries = %v, want at least 1", got)
	}
}
