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

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
// honour in its startup warning, and reloads a nested file.
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
