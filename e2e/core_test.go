package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// stores runs f against the embedded store and against a real Redis.
func stores(t *testing.T, f func(t *testing.T, extra ...string)) {
	t.Run("memory", func(t *testing.T) { f(t) })
	t.Run("redis", func(t *testing.T) {
		r := redistest.StartServer(t)
		f(t, "--redis-url", "redis://"+r.Addr+"/0")
	})
}

func TestDecisions(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": coreRules}), true, extra...)
		ctx := ctxTimeout(t, 30*time.Second)
		call := func(req *rls.RateLimitRequest) *rls.RateLimitResponse {
			t.Helper()
			resp, err := srv.Client.ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			if len(resp.Statuses) != len(req.Descriptors) {
				t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
			}
			return resp
		}
		id := fmt.Sprint(time.Now().UnixNano())

		t.Run("fixed window counts down then rejects", func(t *testing.T) {
			for i := 1; i <= 3; i++ {
				r := call(request(desc("small", id)))
				st := r.Statuses[0]
				if r.OverallCode != rls.RateLimitResponse_OK || st.LimitRemaining != uint32(3-i) {
					t.Fatalf("hit %d: %v remaining %d", i, r.OverallCode, st.LimitRemaining)
				}
				if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_MINUTE ||
					st.CurrentLimit.GetName() != "small" {
					t.Fatalf("current_limit %v", st.CurrentLimit)
				}
				if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
					t.Fatalf("duration_until_reset %v", d)
				}
			}
			r := call(request(desc("small", id)))
			if r.OverallCode != rls.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("4th hit: %v", r)
			}
		})
		t.Run("no rule matches", func(t *testing.T) {
			r := call(request(desc("nothing", "x"), desc("small", id, "deeper", "x")))
			for _, st := range r.Statuses {
				if st.Code != rls.RateLimitResponse_OK || st.CurrentLimit != nil {
					t.Fatalf("unmatched status %v", st)
				}
			}
			r = call(&rls.RateLimitRequest{Domain: "unknown", Descriptors: []*common.RateLimitDescriptor{desc("small", id)}})
			if r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
				t.Fatalf("unknown domain: %v", r)
			}
		})
		t.Run("unlimited", func(t *testing.T) {
			r := call(request(desc("free", id)))
			if st := r.Statuses[0]; st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 4294967295 || st.CurrentLimit != nil {
				t.Fatalf("unlimited: %v", st)
			}
		})
		t.Run("shadow mode answers OK and keeps counting", func(t *testing.T) {
			call(request(desc("shadow", id)))
			r := call(request(desc("shadow", id)))
			if st := r.Statuses[0]; r.OverallCode != rls.RateLimitResponse_OK || st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 0 {
				t.Fatalf("shadow: %v", r)
			}
		})
		t.Run("replaces drops the replaced limit", func(t *testing.T) {
			sid := id + "-r"
			for range 3 {
				call(request(desc("small", sid)))
			}
			r := call(request(desc("small", sid), desc("special", sid)))
			if r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 100 {
				t.Fatalf("replaces: %v", r)
			}
		})
		t.Run("several descriptors count independently", func(t *testing.T) {
			a, b := id+"-a", id+"-b"
			for range 3 {
				call(request(desc("small", a)))
			}
			r := call(request(desc("small", a), desc("small", b)))
			if r.OverallCode != rls.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT ||
				r.Statuses[1].Code != rls.RateLimitResponse_OK || r.Statuses[1].LimitRemaining != 2 {
				t.Fatalf("independent: %v", r)
			}
		})
		t.Run("hits_addend", func(t *testing.T) {
			hid := id + "-h"
			req := request(desc("small", hid))
			req.HitsAddend = 2
			if r := call(req); r.Statuses[0].LimitRemaining != 1 {
				t.Fatalf("request hits_addend 2: %v", r)
			}
			d := desc("small", hid)
			d.HitsAddend = wrapperspb.UInt64(0) // check without counting
			if r := call(request(d)); r.Statuses[0].LimitRemaining != 1 || r.OverallCode != rls.RateLimitResponse_OK {
				t.Fatalf("descriptor hits_addend 0: %v", r)
			}
			d.HitsAddend = wrapperspb.UInt64(2)
			req = request(d)
			req.HitsAddend = 1
			if r := call(req); r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("descriptor hits_addend wins: %v", r)
			}
		})
		t.Run("fractional cost", func(t *testing.T) {
			fid := id + "-f"
			for i := 1; i <= 4; i++ {
				if r := call(request(desc("half", fid))); r.OverallCode != rls.RateLimitResponse_OK {
					t.Fatalf("half-cost hit %d: %v", i, r)
				}
			}
			if r := call(request(desc("half", fid))); r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("5th half-cost hit: %v", r)
			}
		})
		t.Run("limit override replaces the configured limit", func(t *testing.T) {
			d := desc("fixed", id+"-o")
			d.Limit = &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
			r := call(request(d))
			if st := r.Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 1 || st.CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_HOUR {
				t.Fatalf("override: %v", st)
			}
			if r := call(request(d)); r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("override 2nd hit: %v", r)
			}
		})
		t.Run("quota mode", func(t *testing.T) {
			q1, q2 := id+"-q1", id+"-q2"
			call(request(desc("quota", q1)))
			r := call(request(desc("quota", q1), desc("quota", q2)))
			if r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("one quota over: %v", r)
			}
			r = call(request(desc("quota", q1), desc("quota", q2)))
			if r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("every quota over: %v", r)
			}
		})
		t.Run("tenant tier", func(t *testing.T) {
			for i := 1; i <= 5; i++ {
				call(request(desc("user", id, "plan", "premium")))
			}
			if r := call(request(desc("user", id, "plan", "premium"))); r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("premium 6th: %v", r)
			}
		})
	})
}

func TestInvalidArgument(t *testing.T) {
	srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": coreRules}), true)
	ctx := ctxTimeout(t, 10*time.Second)
	unknownUnit := desc("fixed", "x")
	unknownUnit.Limit = &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}
	cases := map[string]*rls.RateLimitRequest{
		"empty domain":          {Descriptors: []*common.RateLimitDescriptor{desc("fixed", "x")}},
		"no descriptors":        request(),
		"override unit UNKNOWN": request(unknownUnit),
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := srv.Client.ShouldRateLimit(ctx, req)
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
				t.Fatalf("got %v, want InvalidArgument with a message", err)
			}
		})
	}
	// The server is still alive and deciding.
	if _, err := srv.Client.ShouldRateLimit(ctx, request(desc("fixed", "alive"))); err != nil {
		t.Fatal(err)
	}
}

// TestDescriptorWithoutEntries: a descriptor with no entries does not fail
// the request, as in envoyproxy/ratelimit: it answers OK without a limit,
// and the request's other descriptors stay enforced.
func TestDescriptorWithoutEntries(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": coreRules}), true, extra...)
		ctx := ctxTimeout(t, 30*time.Second)
		id := fmt.Sprint("noentries-", time.Now().UnixNano())
		req := request(&common.RateLimitDescriptor{}, desc("small", id))
		clearOfWindowEnd(t, time.Minute, 3*time.Second) // the four calls in one minute window
		for i := range 4 {
			resp, err := srv.Client.ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			empty, small := resp.Statuses[0], resp.Statuses[1]
			if empty.Code != rls.RateLimitResponse_OK || empty.CurrentLimit != nil {
				t.Fatalf("call %d: the descriptor without entries answered %v", i, empty)
			}
			want := rls.RateLimitResponse_OK // small allows 3 a minute
			if i == 3 {
				want = rls.RateLimitResponse_OVER_LIMIT
			}
			if small.Code != want || resp.OverallCode != want || small.CurrentLimit.GetRequestsPerUnit() != 3 {
				t.Fatalf("call %d: %v, want %v from the small limit", i, resp, want)
			}
		}
	})
}

func TestRedisDownAnswersUnavailableFast(t *testing.T) {
	r := redistest.StartServer(t)
	srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": coreRules}), true,
		"--redis-url", "redis://"+r.Addr+"/0", "--store-timeout", "50ms")
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := srv.Client.ShouldRateLimit(ctx, request(desc("fixed", "down"))); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	for i := range 5 {
		start := time.Now()
		_, err := srv.Client.ShouldRateLimit(ctx, request(desc("fixed", "down")))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d with Redis down: %v, want Unavailable", i, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("call %d took %v with a 50ms store timeout", i, d)
		}
	}
	r.Restart(t)
	wait.For(t, 10*time.Second, func() bool {
		_, err := srv.Client.ShouldRateLimit(ctx, request(desc("fixed", "down")))
		return err == nil
	})
}

// TestExactness: 500 concurrent callers through 3 server processes sharing
// one Redis admit exactly the limit, for each algorithm.
func TestExactness(t *testing.T) {
	waitOutDayBoundary(t)
	r := redistest.StartServer(t)
	dir := files.Dir(t, map[string]string{"e2e.yaml": coreRules})
	var servers []*fastlimit
	for range 3 {
		servers = append(servers, startServer(t, dir, true, "--redis-url", "redis://"+r.Addr+"/0", "--store-timeout", "5s"))
	}
	checkExactness(t, servers, 500, "e2e")
}

// tally counts the answers of a burst.
type tally struct {
	ok, over, failed int64
	firstErr         error
}

func (c tally) String() string {
	return fmt.Sprintf("%d OK, %d OVER_LIMIT, %d failed (first error %v)", c.ok, c.over, c.failed, c.firstErr)
}

// burst sends n calls of req at once, the ith through servers[i %
// len(servers)] with a timeout of d, and counts the answers.
func burst(servers []*fastlimit, n int, d time.Duration, req *rls.RateLimitRequest) tally {
	var ok, over, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			resp, err := servers[i%len(servers)].Client.ShouldRateLimit(ctx, req)
			switch {
			case err != nil:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			case resp.OverallCode == rls.RateLimitResponse_OK:
				ok.Add(1)
			default:
				over.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	c := tally{ok: ok.Load(), over: over.Load(), failed: failed.Load()}
	c.firstErr, _ = firstErr.Load().(error)
	return c
}

// checkExactness: callers concurrent callers spread over the servers admit
// exactly the limit of 100 a day of domain's keys fixed, sliding and
// bucket.
func checkExactness(t *testing.T, servers []*fastlimit, callers int, domain string) {
	t.Helper()
	const limit = 100
	for _, alg := range []string{"fixed", "sliding", "bucket"} {
		t.Run(alg, func(t *testing.T) {
			id := fmt.Sprintf("exact-%d", time.Now().UnixNano())
			got := burst(servers, callers, 20*time.Second, domainRequest(domain, id, alg))
			if got.failed != 0 || got.ok != limit || got.over != int64(callers-limit) {
				t.Fatalf("%s: %v; want exactly %d OK, %d OVER_LIMIT", alg, got, limit, callers-limit)
			}
		})
	}
}

// waitOutDayBoundary keeps day-long windows from rolling over mid-test.
func waitOutDayBoundary(t *testing.T) { clearOfWindowEnd(t, 24*time.Hour, 30*time.Second) }

func TestCheckCommand(t *testing.T) {
	good := files.Dir(t, map[string]string{"e2e.yaml": coreRules})
	if out, err := runToExit(nil, "check", "--config", good); err != nil {
		t.Fatalf("check of good rules: %v\n%s", err, out)
	}
	bad := files.Dir(t, map[string]string{"bad.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"})
	out, err := runToExit(nil, "check", "--config", bad)
	if err == nil {
		t.Fatalf("check of bad rules passed:\n%s", out)
	}
	if !strings.Contains(out, "bad.yaml:") || !strings.Contains(out, "fortnight") {
		t.Fatalf("check output lacks file, line and cause:\n%s", out)
	}
}

func TestRefusesToStartOnBadRules(t *testing.T) {
	bad := files.Dir(t, map[string]string{"bad.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n"})
	out, err := runToExit(nil, "--config", bad, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if err == nil {
		t.Fatalf("server started on bad rules:\n%s", out)
	}
	if !strings.Contains(out, "bad.yaml:4") {
		t.Fatalf("error does not name file and line:\n%s", out)
	}
}

func TestShippedRules(t *testing.T) {
	srv := startServer(t, "../config", true)
	ctx := ctxTimeout(t, 10*time.Second)
	resp, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "fastlimit",
		Descriptors: []*common.RateLimitDescriptor{desc("api_key", "shipped-test")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Statuses[0].CurrentLimit == nil {
		t.Fatalf("shipped rules do not limit api_key: %v", resp)
	}
}

func TestGRPCHealth(t *testing.T) {
	srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": coreRules}), true)
	resp, err := healthpb.NewHealthClient(srv.conn).Check(ctxTimeout(t, 5*time.Second), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc.health.v1 Check: %v %v", resp, err)
	}
}
