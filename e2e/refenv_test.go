package e2e_test

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// refServer is the binary started with envoyproxy/ratelimit's
// environment only: no flag at all.
type refServer struct {
	*fastlimit
	debug string // DEBUG_PORT's address
}

// refEnv is the environment of a reference deployment on root and Redis
// at redisAddr, on free ports.
func refEnv(t *testing.T, root, redisAddr string) map[string]string {
	t.Helper()
	return map[string]string{
		"RUNTIME_ROOT":         root,
		"RUNTIME_SUBDIRECTORY": "ratelimit",
		"PORT":                 fmt.Sprint(loopback.Port(t)),
		"GRPC_PORT":            fmt.Sprint(loopback.Port(t)),
		"DEBUG_PORT":           fmt.Sprint(loopback.Port(t)),
		"REDIS_SOCKET_TYPE":    "tcp",
		"REDIS_URL":            redisAddr,
		"LOG_FORMAT":           "text",
	}
}

// startRef starts the binary with env (plus PATH) and no arguments, and
// waits for /healthcheck on PORT.
func startRef(t *testing.T, env map[string]string) *refServer {
	t.Helper()
	f := start(t, launch{env: env, envOnly: true})
	return &refServer{fastlimit: f, debug: f.Admin}
}

// decideN sends n requests of one descriptor and returns their codes.
func decideN(t *testing.T, c rls.RateLimitServiceClient, domain, key, value string, n int) []rls.RateLimitResponse_Code {
	t.Helper()
	var codes []rls.RateLimitResponse_Code
	for range n {
		resp, err := c.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest(domain, value, key))
		if err != nil {
			t.Fatalf("%s %s=%s: %v", domain, key, value, err)
		}
		codes = append(codes, resp.GetOverallCode())
	}
	return codes
}

// TestReferenceEnvironment starts the binary as a deployment of
// envoyproxy/ratelimit starts its own: the reference's file settings only,
// no flags. It decides on Redis with the rules found where the reference
// finds them (nested ones too), serves /healthcheck on PORT and its admin
// listener on DEBUG_PORT, logs as text, names the variable it does not
// honour in its startup warning (and that the reference's default statsd
// is not sent), and reloads a nested file.
func TestReferenceEnvironment(t *testing.T) {
	waitOutDayBoundary(t)
	r := redistest.StartServer(t)
	root := files.Dir(t, refRules)
	env := refEnv(t, root, r.Addr)
	env["MEMCACHE_HOST_PORT"] = "memcache:11211"
	srv := startRef(t, env)

	want := []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OK, rls.RateLimitResponse_OK,
		rls.RateLimitResponse_OVER_LIMIT, rls.RateLimitResponse_OVER_LIMIT}
	if got := decideN(t, srv.Client, "ref", "user", "alice", 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("limit 3: codes %v, want %v", got, want)
	}
	if got := decideN(t, srv.Client, "nested", "team", "a", 2); got[0] != rls.RateLimitResponse_OK || got[1] != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("nested rules file, limit 1: codes %v", got)
	}
	// The counters are in the Redis of REDIS_URL.
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctxTimeout(t, 5*time.Second), "*alice*").Result()
	if err != nil || len(keys) != 1 {
		t.Errorf("Redis keys for alice: %v, %v; want one counter", keys, err)
	}

	// The admin listener on DEBUG_PORT (loopback).
	if code := httpCode(srv.debug + "/metrics"); code != http.StatusOK {
		t.Errorf("admin /metrics on DEBUG_PORT: %d", code)
	}
	logs := srv.logs.String()
	if strings.Contains(logs, `{"level"`) {
		t.Errorf("LOG_FORMAT=text, but the logs are JSON:\n%s", logs)
	}
	if !strings.Contains(logs, "envoyproxy/ratelimit settings that FastLimit does not honour") ||
		!strings.Contains(logs, "MEMCACHE_HOST_PORT: ignored") {
		t.Errorf("no startup warning naming MEMCACHE_HOST_PORT:\n%s", logs)
	}
	// USE_STATSD unset: the reference would send statsd to localhost:8125.
	if !strings.Contains(logs, "USE_STATSD: unset; the reference's default (true) sends its stats to statsd at localhost:8125, "+
		"FastLimit sends none: USE_STATSD=true sends them") {
		t.Errorf("no startup warning that statsd is not sent:\n%s", logs)
	}

	// A change to the nested file reloads.
	nested := filepath.Join(root, "ratelimit/config/teams/nested.yaml")
	files.Write(t, nested, oneRule("nested", "team", "day", 7))
	wait.For(t, 5*time.Second, func() bool {
		_, body := scrape.Get(t, "http://"+srv.debug+"/rlconfig")
		return strings.Contains(body, "requests_per_unit=7,")
	})
}

// TestReferenceEnvironmentRefused: a value FastLimit cannot honour stops
// the start, and the message names the variable.
func TestReferenceEnvironmentRefused(t *testing.T) {
	root := files.Dir(t, refRules)
	for _, tc := range []struct{ name, value string }{
		{"BACKEND_TYPE", "memcache"},
		{"PORT", "http"},
		{"LOG_LEVEL", "verbose"},
		{"RUNTIME_WATCH_ROOT", "maybe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := refEnv(t, root, "127.0.0.1:1")
			env[tc.name] = tc.value
			out, err := runToExit(env)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("%s=%s: exit %v, want 2", tc.name, tc.value, err)
			}
			if !strings.Contains(out, tc.name+"=") {
				t.Errorf("%s=%s: the message does not name the variable:\n%s", tc.name, tc.value, out)
			}
		})
	}
}

// TestHealthcheckWithRedisDown: Redis down leaves /healthcheck 200, while
// requests get the failure policy's answer; with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true it answers 503 until Redis
// is back.
func TestHealthcheckWithRedisDown(t *testing.T) {
	for _, active := range []bool{false, true} {
		t.Run(fmt.Sprintf("active=%v", active), func(t *testing.T) {
			r := redistest.StartServer(t)
			env := refEnv(t, files.Dir(t, refRules), r.Addr)
			if active {
				env["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"] = "true"
			}
			srv := startRef(t, env)
			health := srv.HTTP + "/healthcheck"
			r.Stop()
			// Redis is down: a decision fails (--on-store-error error).
			wait.For(t, 5*time.Second, func() bool {
				_, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest("ref", "down", "user"))
				return status.Code(err) == codes.Unavailable
			})
			if active {
				wait.For(t, 5*time.Second, func() bool { return httpCode(health) == http.StatusServiceUnavailable })
				r.Restart(t)
				wait.For(t, 10*time.Second, func() bool { return httpCode(health) == http.StatusOK })
				return
			}
			// Ten checks over a second of Redis down.
			pace := time.NewTicker(100 * time.Millisecond)
			defer pace.Stop()
			for range 10 {
				if code := httpCode(health); code != http.StatusOK {
					t.Fatalf("/healthcheck %d with Redis down, want 200", code)
				}
				<-pace.C
			}
			if code := httpCode(srv.HTTP + "/ready"); code != http.StatusOK {
				t.Errorf("/ready %d with Redis down after it answered once, want 200", code)
			}
		})
	}
}

// TestReferenceEnvironmentUnixSocket reaches a single Redis on its unix
// socket, as REDIS_SOCKET_TYPE=unix and a socket path in REDIS_URL ask.
func TestReferenceEnvironmentUnixSocket(t *testing.T) {
	waitOutDayBoundary(t)
	sock := filepath.Join(t.TempDir(), "redis.sock")
	r := redistest.StartServer(t, "--unixsocket", sock, "--unixsocketperm", "700")
	env := refEnv(t, files.Dir(t, refRules), sock)
	env["REDIS_SOCKET_TYPE"] = "unix"
	srv := startRef(t, env)
	if got := decideN(t, srv.Client, "ref", "user", "unix", 4); got[2] != rls.RateLimitResponse_OK || got[3] != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("limit 3 over the unix socket: codes %v", got)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	if keys, err := rdb.Keys(ctxTimeout(t, 5*time.Second), "*unix*").Result(); err != nil || len(keys) != 1 {
		t.Errorf("Redis keys: %v, %v; want the counter", keys, err)
	}
	if !strings.Contains(srv.logs.String(), `store="redis single `+sock) {
		t.Errorf("logs do not show the socket store:\n%s", srv.logs.String())
	}
}

// TestReferenceUpstreamVariables starts the binary with the variables
// upstream added after the pin: LIMIT_REQUEST_HEADERS_ENABLED (#1168) puts
// the limit, remaining and reset of the request's descriptor in
// request_headers_to_add, under LIMIT_REQUEST_*_HEADER's names, on OK and
// OVER_LIMIT answers alike, with no response headers asked for; and
// REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR (#1191), which FastLimit always
// follows, is named in the startup warning only when false.
func TestReferenceUpstreamVariables(t *testing.T) {
	r := redistest.StartServer(t)
	root := files.Dir(t, refRules)
	for _, readonly := range []string{"true", "false"} {
		t.Run("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR="+readonly, func(t *testing.T) {
			waitOutDayBoundary(t)
			env := refEnv(t, root, r.Addr)
			env["LIMIT_REQUEST_HEADERS_ENABLED"] = "true"
			env["LIMIT_REQUEST_REMAINING_HEADER"] = "X-Upstream-Remaining"
			env["REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR"] = readonly
			srv := startRef(t, env)
			user := fmt.Sprintf("up-%s-%d", readonly, time.Now().UnixNano())
			for i, want := range []string{"RateLimit-Limit=3 X-Upstream-Remaining=2", "RateLimit-Limit=3 X-Upstream-Remaining=1",
				"RateLimit-Limit=3 X-Upstream-Remaining=0", "RateLimit-Limit=3 X-Upstream-Remaining=0"} {
				resp, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest("ref", user, "user"))
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, h := range resp.GetRequestHeadersToAdd() {
					if h.GetKey() != "RateLimit-Reset" {
						got = append(got, h.GetKey()+"="+h.GetValue())
					}
				}
				hs := resp.GetRequestHeadersToAdd()
				if strings.Join(got, " ") != want || len(hs) != 3 || hs[2].GetKey() != "RateLimit-Reset" || len(resp.GetResponseHeadersToAdd()) != 0 {
					t.Errorf("hit %d (%v): request headers %v, response headers %v; want %s and RateLimit-Reset, no response headers",
						i+1, resp.GetOverallCode(), hs, resp.GetResponseHeadersToAdd(), want)
				}
			}
			warned := strings.Contains(srv.logs.String(), "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR: FastLimit always does what true asks")
			if warned != (readonly == "false") {
				t.Errorf("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR=%s: warned %t; logs:\n%s", readonly, warned, srv.logs.String())
			}
		})
	}
}

// TestReferenceRefunds: is_negative_hits as upstream has it since #1140,
// in the reference's environment with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT:
// a refund answers OK with the limit, what remains after it and the time
// to reset; it lands though the request it came in is rejected (whose
// charges do not); and the reference's per-rule total_negative_hits
// counts it, on USE_PROMETHEUS's listener.
func TestReferenceRefunds(t *testing.T) {
	waitOutDayBoundary(t)
	r := redistest.StartServer(t)
	root := files.Dir(t, map[string]string{"ratelimit/config/neg.yaml": "domain: neg\ndescriptors:\n" +
		"  - key: tokens\n    rate_limit: {unit: day, requests_per_unit: 100}\n" +
		"  - key: small\n    rate_limit: {unit: day, requests_per_unit: 1}\n"})
	env := refEnv(t, root, r.Addr)
	prom := fmt.Sprint(loopback.Port(t))
	env["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"], env["USE_STATSD"] = "true", "false"
	env["USE_PROMETHEUS"], env["PROMETHEUS_ADDR"] = "true", "127.0.0.1:"+prom
	srv := startRef(t, env)
	id := fmt.Sprint(time.Now().UnixNano())
	call := func(ds ...*common.RateLimitDescriptor) *rls.RateLimitResponse {
		t.Helper()
		resp, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), &rls.RateLimitRequest{Domain: "neg", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	with := func(key string, hits uint64, refund bool) *common.RateLimitDescriptor {
		d := desc(key, id)
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(hits), refund
		return d
	}
	call(with("tokens", 10, false))
	call(with("small", 1, false)) // small is spent
	resp := call(with("tokens", 4, true), with("small", 1, false), with("tokens", 5, false))
	st := resp.GetStatuses()[0]
	if resp.GetOverallCode() != rls.RateLimitResponse_OVER_LIMIT || st.GetCode() != rls.RateLimitResponse_OK ||
		st.GetCurrentLimit().GetRequestsPerUnit() != 100 || st.GetLimitRemaining() != 94 || st.GetDurationUntilReset().GetSeconds() <= 0 {
		t.Fatalf("a refund beside a denial: %v, refund status %v; want OVER_LIMIT, the refund OK with 100/DAY, 94 left and a reset", resp.GetOverallCode(), st)
	}
	if left := call(with("tokens", 0, false)).GetStatuses()[0].GetLimitRemaining(); left != 94 {
		t.Errorf("after the rejected request: %d tokens left, want 94 (the refund landed, its charge of 5 did not)", left)
	}
	wantSeries(t, metricsPage(t, "127.0.0.1:"+prom), map[string]float64{
		"ratelimit_service_rate_limit_neg_tokens_total_negative_hits":         4,
		`ratelimit_service_rate_limit_total_hits{domain="neg",key1="tokens"}`: 15, // 10, then the rejected 5; the peek of 0 is none
	})
}
