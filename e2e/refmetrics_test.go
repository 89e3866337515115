package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const refStatsRules = `domain: rl
descriptors:
  - key: generic_key
    value: slowpath
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

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

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$`)

// scrapeSeries reads a Prometheus text page into "name{labels}" -> value,
// labels as the page writes them.
func scrapeSeries(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out[m[1]+m[2]] = v
	}
	return out
}

// TestRefMetricsPrometheus starts the binary with USE_PROMETHEUS=true
// and PROMETHEUS_ADDR from the environment on a real Redis, drives a rule
// over its limit and reads the reference's series, and FastLimit's own,
// on PROMETHEUS_ADDR.
func TestRefMetricsPrometheus(t *testing.T) {
	r := startRedis(t)
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	f := startRefWithEnv(t, writeRules(t, map[string]string{"rl.yaml": refStatsRules}), r.Addr,
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+promAddr)
	refDrive(t, f)
	got := scrapeSeries(t, "http://"+promAddr+"/metrics")
	for series, want := range map[string]float64{
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
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if t.Failed() {
		var names []string
		for k := range got {
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
	r := startRedis(t)
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
	f := startRefWithEnv(t, writeRules(t, map[string]string{"rl.yaml": refStatsRules}), r.Addr,
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
