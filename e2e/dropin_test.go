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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/internal/testing/dashboard"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/refserver"
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

// TestLongAndOddValuesOnReference: envoyproxy/ratelimit answers the 64
// KiB value as FastLimit does, request for request, and fails the request
// whose value is not UTF-8 with Internal, where FastLimit decides it
// (TestLongAndOddValuesDecided; docs/envoy.md).
func TestLongAndOddValuesOnReference(t *testing.T) {
	refserver.Bin(t)
	p := startPair(t, map[string]string{"dropin.yaml": dropinRules}, nil)
	long := strings.Repeat("/segment", 64<<10/8)
	p.run(t, sequence{name: "64 KiB value", unit: 3600, build: func(salt string) []*rls.RateLimitRequest {
		var reqs []*rls.RateLimitRequest
		for range 6 {
			reqs = append(reqs, requestIn("dropin", desc("path", long+salt), desc("api_key", "long-"+salt)))
		}
		return reqs
	}})
	raw := rawRequest("dropin", [][2]string{{"path", "bad\xff\xfe"}}, [][2]string{{"api_key", "odd"}})
	var out []byte
	err := p.ref.Conn.Invoke(ctxTimeout(t, 10*time.Second), rls.RateLimitService_ShouldRateLimit_FullMethodName, raw, &out, forceRaw)
	if status.Code(err) != codes.Internal {
		t.Errorf("reference, value not UTF-8: %v, want Internal", err)
	}
}

// TestResetWholeSecondsNoRetryAfterOnOK: under a per-second rule
// duration_until_reset is 1 s, whole seconds as the reference answers
// (TestSameAnswersAsReference compares them; Envoy's x-ratelimit-reset
// reads its seconds); with global shadow mode an answer
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

// TestReferenceJSONLogs: LOG_FORMAT=json writes every line as JSON with
// the keys every JSON line of envoyproxy/ratelimit has (@timestamp,
// @message, level), timestamps in its layout (RFC 3339 with nanoseconds)
// and levels in its words (logrus'), none of zap's keys, so that a
// pipeline keyed on the reference's lines reads every line.
func TestReferenceJSONLogs(t *testing.T) {
	ref := refserver.Start(t, refserver.Options{Rules: map[string]string{"d.yaml": dropinRules},
		Env: map[string]string{"LOG_FORMAT": "json", "LOG_LEVEL": "info"}})
	// The reference writes its first lines before it reads LOG_FORMAT.
	want := jsonLogShape(t, "envoyproxy/ratelimit", ref.Logs(), true)
	root := files.Dir(t, map[string]string{"ratelimit/config/d.yaml": dropinRules})
	env := refEnv(t, root, redistest.StartServer(t).Addr)
	env["LOG_FORMAT"], env["LOG_LEVEL"] = "json", "info"
	env["MEMCACHE_HOST_PORT"] = "m:11211" // a warning line
	srv := startRef(t, env)
	srv.Stop()
	got := jsonLogShape(t, "FastLimit", srv.logs.String(), false)
	for k := range want.keys {
		if !got.keys[k] {
			t.Errorf("a FastLimit line lacks %q, which every line of the reference has:\n%s", k, srv.logs.String())
		}
	}
	for l, n := range got.levels {
		if want.levels[l] == 0 {
			t.Errorf("%d FastLimit lines at level %q, a word the reference does not use (it uses %v)", n, l, want.levels)
		}
	}
	if got.levels["info"] == 0 || got.levels["warning"] == 0 {
		t.Errorf("levels %v, want info and warning lines:\n%s", got.levels, srv.logs.String())
	}
}

// logShape is what JSON log lines have in common: the keys of every line,
// and how many lines use each level.
type logShape struct {
	keys   map[string]bool
	levels map[string]int
}

// jsonLogShape reads logs line by line: each must be JSON (but for lines
// before the first JSON one when skipText), with @timestamp in RFC 3339
// with nanoseconds and a non-empty @message, and none of zap's keys.
func jsonLogShape(t *testing.T, who, logs string, skipText bool) logShape {
	t.Helper()
	shape := logShape{levels: map[string]int{}}
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			if skipText && shape.keys == nil {
				continue
			}
			t.Fatalf("%s line %q is not JSON: %v", who, sc.Text(), err)
		}
		ts, _ := line["@timestamp"].(string)
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("%s line %q: @timestamp %q: %v", who, sc.Text(), ts, err)
		}
		if msg, _ := line["@message"].(string); msg == "" {
			t.Errorf("%s line %q has no @message", who, sc.Text())
		}
		for _, k := range []string{"ts", "msg", "L", "M"} {
			if _, ok := line[k]; ok {
				t.Errorf("%s line %q has zap's key %q", who, sc.Text(), k)
			}
		}
		if shape.keys == nil {
			shape.keys = map[string]bool{}
			for k := range line {
				shape.keys[k] = true
			}
		}
		for k := range shape.keys {
			if _, ok := line[k]; !ok {
				delete(shape.keys, k)
			}
		}
		if l, ok := line["level"].(string); ok {
			shape.levels[l]++
		}
	}
	if shape.keys == nil {
		t.Fatalf("%s wrote no JSON line:\n%s", who, logs)
	}
	return shape
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

// names is the set of "name|type" of the stats received.
func (s *statsdServer) names() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, l := range s.lines {
		name, rest, _ := strings.Cut(l, ":")
		_, typ, _ := strings.Cut(rest, "|")
		out[name+"|"+typ] = true
	}
	return out
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
// the stats go to statsd as the reference's default says, a line at start
// says so, and statsd gets every stat envoyproxy/ratelimit sends for the
// same three calls (but refNotSent), the response timer as one
// whole-milliseconds line a call.
func TestStatsdDefaultAndTimer(t *testing.T) {
	refserver.Bin(t)
	sd, refSD := startStatsd(t), startStatsd(t)
	root := files.Dir(t, map[string]string{"ratelimit/config/d.yaml": dropinRules})
	env := refEnv(t, root, redistest.StartServer(t).Addr)
	host, port, _ := net.SplitHostPort(sd.lis.Addr().String())
	env["STATSD_HOST"], env["STATSD_PORT"], env["STATS_FLUSH_INTERVAL"] = host, port, "200ms"
	srv := startRef(t, env)
	host, port, _ = net.SplitHostPort(refSD.lis.Addr().String())
	ref := refserver.Start(t, refserver.Options{Rules: map[string]string{"d.yaml": dropinRules},
		Env: map[string]string{"USE_STATSD": "true", "STATSD_HOST": host, "STATSD_PORT": port, "STATS_FLUSH_INTERVAL": "200ms"}})
	for _, c := range []rls.RateLimitServiceClient{srv.Client, ref.Client} {
		for range 3 {
			if _, err := c.ShouldRateLimit(ctxTimeout(t, 5*time.Second), requestIn("dropin", desc("api_key", "statsd"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	timer := regexp.MustCompile(`^ratelimit_server\.ShouldRateLimit\.response_time:\d+\|ms$`)
	missing := func() []string {
		got := sd.names()
		var out []string
		for n := range refSD.names() {
			if !got[n] && refNotSent[n] == "" {
				out = append(out, n)
			}
		}
		return out
	}
	wait.True(10*time.Second, func() bool {
		return len(sd.matching(timer)) == 3 && len(refSD.matching(timer)) == 3 && len(missing()) == 0
	})
	// Five more flushes of each: stats the reference sends later.
	flush := regexp.MustCompile(`^ratelimit\.go\.numGoroutine:`) // a gauge of every flush
	n, m := len(sd.matching(flush)), len(refSD.matching(flush))
	wait.For(t, 30*time.Second, func() bool { return len(sd.matching(flush)) >= n+5 && len(refSD.matching(flush)) >= m+5 })
	if n, m := len(sd.matching(timer)), len(refSD.matching(timer)); n != 3 || m != 3 {
		t.Errorf("response timer lines: FastLimit %d, reference %d, want one a call", n, m)
	}
	if m := missing(); len(m) > 0 {
		t.Errorf("stats the reference sends and FastLimit does not: %v", m)
	}
	if !strings.Contains(srv.logs.String(), "USE_STATSD is unset and STATSD_HOST is set: sending envoyproxy/ratelimit's stats to statsd at "+sd.lis.Addr().String()) {
		t.Errorf("no startup line about USE_STATSD:\n%s", srv.logs.String())
	}
}

// refNotSent are the stats and series envoyproxy/ratelimit sends for
// these tests' calls that FastLimit does not, and why.
var refNotSent = map[string]string{
	"runtime.load_attempts|c":                                                 "goruntime's loader, which FastLimit does not use",
	"runtime.num_values|g":                                                    "goruntime's loader, which FastLimit does not use",
	"ratelimit_localcache_averageAccessTime":                                  "freecache's own (docs/metrics.md)",
	"ratelimit_localcache_evacuateCount":                                      "freecache's own (docs/metrics.md)",
	"ratelimit_localcache_expiredCount":                                       "freecache's own (docs/metrics.md)",
	"ratelimit_localcache_lookupCount":                                        "freecache's own (docs/metrics.md)",
	"ratelimit_localcache_missCount":                                          "freecache's own (docs/metrics.md)",
	"ratelimit_localcache_overwriteCount":                                     "freecache's own (docs/metrics.md)",
	"ratelimit_service_rate_limit_dropin_api_key_over_limit_with_local_cache": "hits the local cache denies are counted over_limit alone (docs/migrating.md)",
}

// TestReferencePrometheusRuntimeSeries: under USE_PROMETHEUS the series
// envoyproxy/ratelimit serves after the same seven calls (its Go runtime,
// Redis pool and local cache series among them) are served (but
// refNotSent), and the response time is in seconds (upstream's main
// since #1104; the pinned version's are milliseconds).
func TestReferencePrometheusRuntimeSeries(t *testing.T) {
	refserver.Bin(t)
	root := files.Dir(t, map[string]string{"ratelimit/config/d.yaml": dropinRules})
	env := refEnv(t, root, redistest.StartServer(t).Addr)
	prom, refProm := loopback.Addr(t), loopback.Addr(t)
	env["USE_STATSD"], env["USE_PROMETHEUS"], env["PROMETHEUS_ADDR"] = "false", "true", prom
	env["LOCAL_CACHE_SIZE_IN_BYTES"] = "1048576"
	srv := startRef(t, env)
	ref := refserver.Start(t, refserver.Options{Rules: map[string]string{"d.yaml": dropinRules}, Env: map[string]string{
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": refProm, "LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "STATS_FLUSH_INTERVAL": "200ms"}})
	for _, c := range []rls.RateLimitServiceClient{srv.Client, ref.Client} {
		for range 7 { // api_key allows 5: over-limit keys land in the local cache
			if _, err := c.ShouldRateLimit(ctxTimeout(t, 5*time.Second), requestIn("dropin", desc("api_key", "prom"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	families := func(addr string) map[string]bool {
		out := map[string]bool{}
		for k := range scrape.Series(t, metricsPage(t, addr)) {
			if name, _, _ := strings.Cut(k, "{"); strings.HasPrefix(name, "ratelimit_") {
				out[name] = true
			}
		}
		return out
	}
	// The reference's gauges come with its first flushes; then five more
	// flushes (its allocated-bytes gauge is set at each): series it serves later.
	wait.For(t, 10*time.Second, func() bool { return families(refProm)["ratelimit_go_alloc"] })
	flushes := 0
	for last := -1.0; flushes < 5; {
		var v float64
		wait.For(t, 30*time.Second, func() bool {
			v = scrape.Series(t, metricsPage(t, refProm))["ratelimit_go_totalAlloc"]
			return v != last
		})
		last, flushes = v, flushes+1
	}
	got := families(prom)
	for name := range families(refProm) {
		if !got[name] && refNotSent[name] == "" {
			t.Errorf("the reference serves %s, FastLimit does not", name)
		}
	}
	series := scrape.Series(t, metricsPage(t, prom))
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
