package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/internal/testing/dashboard"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestLongAndOddValuesDecided: a request with a 64 KiB value, and one with
// bytes that are not UTF-8, each beside a per-key descriptor of limit 5,
// answer OK five times then OVER_LIMIT: the long value is decided as the
// reference decides it, the odd one where the reference fails the request
// (and Envoy's failure_mode_deny: false would drop every limit).
func TestLongAndOddValuesDecided(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		srv := startServer(t, files.Dir(t, map[string]string{"dropin.yaml": dropinRules}), true, extra...)
		ctx := ctxTimeout(t, 30*time.Second)
		id := fmt.Sprint(time.Now().UnixNano())
		long := strings.Repeat("/segment", 64<<10/8)
		for i := range 6 {
			want := rls.RateLimitResponse_OK
			if i == 5 {
				want = rls.RateLimitResponse_OVER_LIMIT
			}
			resp, err := srv.Client.ShouldRateLimit(ctx, requestIn("dropin", desc("path", long+id), desc("api_key", "long-"+id)))
			if err != nil || resp.GetOverallCode() != want || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 100 {
				t.Fatalf("64 KiB value, hit %d: %v, %v; want %v", i+1, resp, err, want)
			}
			raw := rawRequest("dropin", [][2]string{{"path", "bad\xff\xfe" + id}}, [][2]string{{"api_key", "odd-" + id}})
			var out []byte
			if err := srv.conn.Invoke(ctx, rls.RateLimitService_ShouldRateLimit_FullMethodName, raw, &out, forceRaw); err != nil {
				t.Fatalf("value not UTF-8, hit %d: %v", i+1, err)
			}
			odd := decodeResponse(t, out)
			if odd.GetOverallCode() != want || odd.GetStatuses()[1].GetCurrentLimit().GetRequestsPerUnit() != 5 {
				t.Fatalf("value not UTF-8, hit %d: %v; want %v", i+1, odd, want)
			}
		}
	})
}

// TestResetWholeSecondsNoRetryAfterOnOK: under a per-second rule
// duration_until_reset is 1 s, as the reference answers (Envoy's
// x-ratelimit-reset reads its seconds); with global shadow mode an answer
// over the limit is OK and carries the rate-limit headers but no
// Retry-After, which Envoy would pass to a client on a 200.
func TestResetWholeSecondsNoRetryAfterOnOK(t *testing.T) {
	srv := startServer(t, files.Dir(t, map[string]string{"dropin.yaml": dropinRules}), true,
		"--response-headers", "ietf", "--shadow-mode")
	ctx := ctxTimeout(t, 30*time.Second)
	id := fmt.Sprint(time.Now().UnixNano())
	for range 20 {
		resp, err := srv.Client.ShouldRateLimit(ctx, requestIn("dropin", desc("per_second", id)))
		if err != nil {
			t.Fatal(err)
		}
		if d := resp.GetStatuses()[0].GetDurationUntilReset(); d.GetSeconds() != 1 || d.GetNanos() != 0 {
			t.Fatalf("per-second rule: duration_until_reset %v, want 1s", d.AsDuration())
		}
	}
	var over *rls.RateLimitResponse
	for range 7 { // api_key allows 5: the 6th and 7th are over, and shadowed globally
		resp, err := srv.Client.ShouldRateLimit(ctx, requestIn("dropin", desc("api_key", "global-"+id)))
		if err != nil {
			t.Fatal(err)
		}
		over = resp
	}
	h := map[string]string{}
	for _, hv := range over.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	if over.GetOverallCode() != rls.RateLimitResponse_OK || over.GetStatuses()[0].GetCode() != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("global shadow mode: %v, want OK over a status OVER_LIMIT", over)
	}
	if _, ok := h["Retry-After"]; ok || h["RateLimit"] == "" {
		t.Errorf("an OK answer's headers %v: want RateLimit, no Retry-After", h)
	}
}

// TestReferenceJSONLogs: LOG_FORMAT=json writes the reference's keys,
// @timestamp (RFC 3339 with nanoseconds), @message and level in logrus'
// words, so that a pipeline keyed on them reads every line.
func TestReferenceJSONLogs(t *testing.T) {
	root := files.Dir(t, map[string]string{"ratelimit/config/d.yaml": dropinRules})
	env := refEnv(t, root, redistest.StartServer(t).Addr)
	env["LOG_FORMAT"], env["LOG_LEVEL"] = "json", "info"
	env["MEMCACHE_HOST_PORT"] = "m:11211" // a warning line
	srv := startRef(t, env)
	srv.Stop()
	var infos, warnings int
	sc := bufio.NewScanner(strings.NewReader(srv.logs.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		ts, _ := line["@timestamp"].(string)
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("line %q: @timestamp %q: %v", sc.Text(), ts, err)
		}
		if msg, _ := line["@message"].(string); msg == "" {
			t.Errorf("line %q has no @message", sc.Text())
		}
		switch line["level"] {
		case "info":
			infos++
		case "warning":
			warnings++
		case "debug", "error", "fatal", "panic":
		default:
			t.Errorf("line %q: level %v is not one of logrus' words", sc.Text(), line["level"])
		}
		for _, k := range []string{"ts", "msg", "L", "M"} {
			if _, ok := line[k]; ok {
				t.Errorf("line %q has zap's key %q", sc.Text(), k)
			}
		}
	}
	if infos == 0 || warnings == 0 {
		t.Errorf("%d info and %d warning lines, want both:\n%s", infos, warnings, srv.logs.String())
	}
}

// statsdServer is a statsd server on a loopback TCP port (gostats' and
// the reference's protocol); it collects the lines it receives.
type statsdServer struct {
	lis   net.Listener
	mu    sync.Mutex
	lines []string
}

func startStatsd(t *testing.T) *statsdServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &statsdServer{lis: lis}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					s.mu.Lock()
					s.lines = append(s.lines, sc.Text())
					s.mu.Unlock()
				}
			}()
		}
	}()
	return s
}

func (s *statsdServer) matching(re *regexp.Regexp) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.lines {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// TestStatsdDefaultAndTimer: with USE_STATSD unset and STATSD_HOST set,
// the stats go to statsd as the reference's default says, a line at
// start says so, and statsd gets the reference's response timer (one
// whole-milliseconds line a call), its counters and its runtime gauges.
func TestStatsdDefaultAndTimer(t *testing.T) {
	sd := startStatsd(t)
	root := files.Dir(t, map[string]string{"ratelimit/config/d.yaml": dropinRules})
	env := refEnv(t, root, redistest.StartServer(t).Addr)
	host, port, _ := net.SplitHostPort(sd.lis.Addr().String())
	env["STATSD_HOST"], env["STATSD_PORT"], env["STATS_FLUSH_INTERVAL"] = host, port, "200ms"
	srv := startRef(t, env)
	for range 3 {
		if _, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), requestIn("dropin", desc("api_key", "statsd"))); err != nil {
			t.Fatal(err)
		}
	}
	timer := regexp.MustCompile(`^ratelimit_server\.ShouldRateLimit\.response_time:\d+\|ms$`)
	total := regexp.MustCompile(`^ratelimit_server\.ShouldRateLimit\.total_requests:\d+\|c$`)
	gauge := regexp.MustCompile(`^ratelimit\.go\.numGoroutine:\d+\|g$`)
	pool := regexp.MustCompile(`^ratelimit\.redis_pool\.cx_active:\d+\|g$`)
	hits := regexp.MustCompile(`^ratelimit\.service\.rate_limit\.dropin\.api_key\.total_hits:\d+\|c$`)
	wait.For(t, 10*time.Second, func() bool {
		return len(sd.matching(timer)) == 3 && len(sd.matching(total)) > 0 && len(sd.matching(gauge)) > 0 &&
			len(sd.matching(pool)) > 0 && len(sd.matching(hits)) > 0
	})
	if !strings.Contains(srv.logs.String(), "USE_STATSD is unset and STATSD_HOST is set: sending envoyproxy/ratelimit's stats to statsd at "+sd.lis.Addr().String()) {
		t.Errorf("no startup line about USE_STATSD:\n%s", srv.logs.String())
	}
}

// TestReferencePrometheusRuntimeSeries: under USE_PROMETHEUS the
// reference's Go runtime, Redis pool and local cache series are there,
// and the response time is in seconds (upstream's mapping since #1104).
func TestReferencePrometheusRuntimeSeries(t *testing.T) {
	root := files.Dir(t, map[string]string{"ratelimit/config/d.yaml": dropinRules})
	env := refEnv(t, root, redistest.StartServer(t).Addr)
	prom := loopback.Port(t)
	env["USE_STATSD"], env["USE_PROMETHEUS"], env["PROMETHEUS_ADDR"] = "false", "true", fmt.Sprintf("127.0.0.1:%d", prom)
	env["LOCAL_CACHE_SIZE_IN_BYTES"] = "1048576"
	srv := startRef(t, env)
	for range 7 { // api_key allows 5: over-limit keys land in the local cache
		if _, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), requestIn("dropin", desc("api_key", "prom"))); err != nil {
			t.Fatal(err)
		}
	}
	series := scrape.Series(t, metricsPage(t, fmt.Sprintf("127.0.0.1:%d", prom)))
	for _, name := range []string{"ratelimit_go_alloc", "ratelimit_go_heapInuse", "ratelimit_go_numGoroutine", "ratelimit_go_totalAlloc",
		"ratelimit_go_mallocs", "ratelimit_redis_pool_cx_active", "ratelimit_redis_pool_cx_total",
		"ratelimit_localcache_entryCount", "ratelimit_localcache_hitCount"} {
		if _, ok := series[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	if series["ratelimit_go_alloc"] <= 0 || series["ratelimit_redis_pool_cx_active"] < 1 || series["ratelimit_localcache_entryCount"] < 1 {
		t.Errorf("alloc %v, pool %v, cache entries %v", series["ratelimit_go_alloc"], series["ratelimit_redis_pool_cx_active"],
			series["ratelimit_localcache_entryCount"])
	}
	count := series[`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`]
	sum := series[`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"}`]
	if count != 7 || sum >= count { // seconds: each call far below one
		t.Errorf("response time: count %v sum %v, want 7 calls summing to well under 7 s", count, sum)
	}
}

// TestRedisURLUnsetWarns: in the reference's environment with no REDIS_URL
// and no socket at the reference's default, the startup warning names the
// in-memory store and what it means for replicas.
func TestRedisURLUnsetWarns(t *testing.T) {
	if _, err := os.Stat("/var/run/nutcracker/ratelimit.sock"); err == nil {
		t.Skip("this machine has the reference's default socket")
	}
	root := files.Dir(t, map[string]string{"ratelimit/config/d.yaml": dropinRules})
	env := refEnv(t, root, "")
	delete(env, "REDIS_URL")
	delete(env, "REDIS_SOCKET_TYPE")
	srv := startRef(t, env)
	logs := srv.logs.String()
	if !strings.Contains(logs, "REDIS_URL: unset") || !strings.Contains(logs, "in-memory store") || !strings.Contains(logs, "each replica counts alone") {
		t.Errorf("no warning about the in-memory store:\n%s", logs)
	}
	if got := decideN(t, srv.Client, "dropin", "api_key", "mem", 6); got[4] != rls.RateLimitResponse_OK || got[5] != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("in memory: %v", got)
	}
}

// TestDashboardSeries: every series the Grafana dashboard queries is
// served by a running server (on Redis, with the local cache, after OK,
// over-limit, near-limit, shadowed and unmatched decisions and a reload).
func TestDashboardSeries(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "charts", "fastlimit", "dashboards", "fastlimit.json"))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := dashboard.Queries(b)
	if err != nil {
		t.Fatal(err)
	}
	names, err := dashboard.MetricNamesOf(qs)
	if err != nil || len(names) == 0 {
		t.Fatalf("dashboard series %v: %v", names, err)
	}
	dir := files.Dir(t, map[string]string{"dropin.yaml": dropinRules})
	r := redistest.StartServer(t)
	admin := loopback.Addr(t)
	srv := startServer(t, dir, true, "--redis-url", "redis://"+r.Addr+"/0", "--over-limit-cache-bytes", "1048576",
		"--admin-addr", admin)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, req := range []*rls.RateLimitRequest{
		requestIn("dropin", desc("api_key", "dash"), desc("shadowed", "dash"), desc("nothing", "matches")),
		requestIn("dropin", desc("api_key", "dash"), desc("shadowed", "dash")),
	} {
		for range 4 {
			if _, err := srv.Client.ShouldRateLimit(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A reload, so that the loads counter has moved too.
	files.Write(t, filepath.Join(dir, "dropin.yaml"), strings.Replace(dropinRules, "requests_per_unit: 5}", "requests_per_unit: 6}", 1))
	wait.For(t, 10*time.Second, func() bool {
		return scrape.Value(t, metricsPage(t, admin), `fastlimit_config_loads_total{result="success"}`) >= 2
	})
	body := metricsPage(t, admin)
	for _, n := range names {
		if !hasFamily(body, n) {
			t.Errorf("the dashboard queries %s, which the server does not serve", n)
		}
	}
	t.Logf("%d series of the dashboard, all served", len(names))
}

// hasFamily reports whether the exposition has a sample of name.
func hasFamily(body, name string) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			return true
		}
	}
	return false
}

// forceRaw sends raw bytes as the request (see rawCodec).
var forceRaw = grpc.ForceCodecV2(rawCodec{})

func decodeResponse(t *testing.T, b []byte) *rls.RateLimitResponse {
	t.Helper()
	var resp rls.RateLimitResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	return &resp
}
