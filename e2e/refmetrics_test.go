package e2e_test

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

// startRefWithEnv starts the binary on the rules in dir and Redis with
// flags, plus env, and waits for /healthcheck.
func startRefWithEnv(t *testing.T, dir, redisAddr string, env ...string) *fastlimit {
	t.Helper()
	return start(t, launch{rules: dir, env: envMap(env...), flags: []string{"--redis-url", "redis://" + redisAddr}})
}

// refDrive sends 4 requests over the generic_key rule (limit 2) and one
// for each of two users, and checks the codes.
func refDrive(t *testing.T, f *fastlimit) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	req := func(k, v string) *rls.RateLimitRequest {
		return &rls.RateLimitRequest{Domain: "rl", Descriptors: []*common.RateLimitDescriptor{
			{Entries: []*common.RateLimitDescriptor_Entry{{Key: k, Value: v}}},
		}}
	}
	var over int
	for range 4 {
		resp, err := f.Client.ShouldRateLimit(ctx, req("generic_key", "slowpath"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == rls.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over != 2 {
		t.Fatalf("%d of 4 requests over a limit of 2, want 2", over)
	}
	for _, u := range []string{"alice", "bob"} {
		if _, err := f.Client.ShouldRateLimit(ctx, req("user", u)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRefMetricsPrometheus starts the binary with USE_PROMETHEUS=true
// and PROMETHEUS_ADDR from the environment on a real Redis, drives a rule
// over its limit and reads the reference's series, and FastLimit's own,
// on PROMETHEUS_ADDR.
func TestRefMetricsPrometheus(t *testing.T) {
	r := redistest.StartServer(t)
	promAddr := loopback.Addr(t)
	f := startRefWithEnv(t, files.Dir(t, map[string]string{"rl.yaml": refStatsRules}), r.Addr,
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+promAddr)
	refDrive(t, f)
	page := metricsPage(t, promAddr)
	wantSeries(t, page, map[string]float64{
		`ratelimit_service_rate_limit_over_limit{domain="rl",key1="generic_key_slowpath"}`:   2,
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="generic_key_slowpath"}`:   4,
		`ratelimit_service_rate_limit_within_limit{domain="rl",key1="generic_key_slowpath"}`: 2,
		`ratelimit_service_rate_limit_near_limit{domain="rl",key1="generic_key_slowpath"}`:   1,
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="user_alice"}`:             1,
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="user_bob"}`:               1,
		`ratelimit_service_config_load_success`:                                              1,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:                    6,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`:       6,
		`fastlimit_requests_total{code="OVER_LIMIT"}`:                                        2,
	})
	if t.Failed() {
		var names []string
		for k := range scrape.Series(t, page) {
			if strings.HasPrefix(k, "ratelimit_") {
				names = append(names, k)
			}
		}
		t.Logf("ratelimit_* series on PROMETHEUS_ADDR: %v", names)
	}
}

// TestRefMetricsStatsd starts the binary with USE_STATSD=true over UDP to
// a listener of the test and reads the reference's stat names from the
// datagrams.
func TestRefMetricsStatsd(t *testing.T) {
	r := redistest.StartServer(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	lines := make(chan string, 1000)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				lines <- l
			}
		}
	}()
	port := pc.LocalAddr().(*net.UDPAddr).Port
	f := startRefWithEnv(t, files.Dir(t, map[string]string{"rl.yaml": refStatsRules}), r.Addr,
		"USE_STATSD=true", "STATSD_PROTOCOL=udp", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(port),
		"STATS_FLUSH_INTERVAL=100ms", "EXTRA_TAGS=env:e2e")
	refDrive(t, f)
	want := map[string]uint64{
		"ratelimit.service.rate_limit.rl.generic_key_slowpath.over_limit.__env=e2e": 2,
		"ratelimit.service.rate_limit.rl.generic_key_slowpath.total_hits.__env=e2e": 4,
		"ratelimit.service.rate_limit.rl.user_alice.total_hits.__env=e2e":           1,
		"ratelimit.service.config_load_success.__env=e2e":                           1,
		"ratelimit_server.ShouldRateLimit.total_requests.__env=e2e":                 6,
	}
	got := map[string]uint64{}
	lineRE := regexp.MustCompile(`^(.+):(\d+)\|c$`)
	deadline := time.After(10 * time.Second)
	for !covers(got, want) {
		select {
		case l := <-lines:
			m := lineRE.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("line %q is not a statsd counter", l)
			}
			n, _ := strconv.ParseUint(m[2], 10, 64)
			got[m[1]] += n // counts since the last flush add up
		case <-deadline:
			t.Fatalf("stats after 10s: %v\nwant at least %v", got, want)
		}
	}
}

func covers(got, want map[string]uint64) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
