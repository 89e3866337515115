package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// envoyRules are rules of http.yaml's domain: each client address may send
// api requests and grpc calls a day; a fixed window of a day, so that
// no window turns within a test but once a day.
func envoyRules(api, grpc int, algorithm string) string {
	return fmt.Sprintf(`domain: envoy-e2e
descriptors:
  - key: path_class
    value: api
    descriptors:
      - key: remote_address
        rate_limit: {name: api_per_client, algorithm: %[3]s, unit: day, requests_per_unit: %[1]d}
  - key: path_class
    value: grpc
    descriptors:
      - key: remote_address
        rate_limit: {name: grpc_per_client, unit: day, requests_per_unit: %[2]d}
`, api, grpc, algorithm)
}

// denyModes are the two settings of the filter's failure_mode_deny, and the
// code each answers when the call to FastLimit fails.
var denyModes = []struct {
	deny bool
	code int // Envoy's answer when the rate-limit call fails
}{{false, http.StatusOK}, {true, http.StatusInternalServerError}}

func denySub(deny bool) []string {
	return []string{"failure_mode_deny: false", fmt.Sprintf("failure_mode_deny: %v", deny)}
}

// startDenyFronts starts one front on rls per failure_mode_deny setting,
// with subs besides, and checks that each passes a request while rls
// answers.
func startDenyFronts(t *testing.T, name, rls string, subs ...string) []*httpFront {
	t.Helper()
	var out []*httpFront
	for _, m := range denyModes {
		f := startHTTPFront(t, fmt.Sprintf("%s-deny-%v", name, m.deny), rls, append(denySub(m.deny), subs...)...)
		if r := f.client(t).Do(t, "GET", "/"); r.Code != http.StatusOK || f.rlsErrors() != 0 {
			t.Fatalf("failure_mode_deny %v, before the failure: %d, %d failed calls", m.deny, r.Code, f.rlsErrors())
		}
		out = append(out, f)
	}
	return out
}

// TestEnvoyFastLimitDown: with FastLimit stopped, Envoy's filter lets
// requests through with failure_mode_deny false and answers 500 with true,
// counting each failed call.
func TestEnvoyFastLimitDown(t *testing.T) {
	fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(1000, 1000, "fixed_window")}))
	fronts := startDenyFronts(t, "down", fl.GRPC)
	fl.Stop()
	for i, m := range denyModes {
		f := fronts[i]
		if got := f.client(t).Codes(t, 3, "GET", "/"); got[m.code] != 3 {
			t.Errorf("failure_mode_deny %v, FastLimit stopped: %v, want %d×3", m.deny, got, m.code)
		}
		if n := f.rlsErrors(); n != 3 {
			t.Errorf("failure_mode_deny %v: Envoy counted %d failed calls, want 3", m.deny, n)
		}
	}
}

// TestEnvoyRedisDown: with Redis stopped, FastLimit answers by
// --on-store-error, and Envoy's failure_mode_deny decides only what
// FastLimit leaves to it: allow passes the request and deny refuses it
// (429) whatever Envoy's setting; error answers Unavailable, which Envoy
// passes (false) or refuses with 500 (true).
func TestEnvoyRedisDown(t *testing.T) {
	cases := []struct {
		policy string
		codes  [2]int // by denyModes
		errors bool   // Envoy counts failed calls
	}{
		{"allow", [2]int{200, 200}, false},
		{"deny", [2]int{429, 429}, false},
		{"error", [2]int{200, 500}, true},
	}
	for _, tc := range cases {
		t.Run(tc.policy, func(t *testing.T) {
			r := redistest.StartServer(t)
			fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(1000, 1000, "fixed_window")}),
				"--redis-url", "redis://"+r.Addr+"/0", "--on-store-error", tc.policy)
			fronts := startDenyFronts(t, "redis-"+tc.policy, fl.GRPC)
			r.Stop()
			for i, m := range denyModes {
				f := fronts[i]
				if got := f.client(t).Codes(t, 3, "GET", "/"); got[tc.codes[i]] != 3 {
					t.Errorf("failure_mode_deny %v: %v, want %d×3", m.deny, got, tc.codes[i])
				}
				if n := f.rlsErrors(); (n == 3) != tc.errors || n != 0 && n != 3 {
					t.Errorf("failure_mode_deny %v: Envoy counted %d failed calls", m.deny, n)
				}
			}
			if n := series(t, fl, "fastlimit_store_errors_total"); n < 6 {
				t.Errorf("FastLimit counted %v store errors, want 6", n)
			}
		})
	}
}

// TestEnvoySlowerThanTimeout freezes FastLimit itself (SIGSTOP), so that
// it answers nothing within the filter's 0.5 s: Envoy's failure mode
// answers after the timeout, passing the request (false) or refusing it
// with 500 (true).
func TestEnvoySlowerThanTimeout(t *testing.T) {
	fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(1000, 1000, "fixed_window")}))
	fronts := startDenyFronts(t, "slow", fl.GRPC, "timeout: 10s", "timeout: 0.5s")
	if err := fl.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.cmd.Process.Signal(syscall.SIGCONT) }) // before it stops
	const calls = 2
	for i, m := range denyModes {
		f := fronts[i]
		c := f.client(t)
		for range calls {
			start := time.Now()
			// Envoy's timers may fire a little early: 0.45 s for its 0.5.
			if got, took := c.Do(t, "GET", "/").Code, time.Since(start); got != m.code || took < 450*time.Millisecond {
				t.Errorf("failure_mode_deny %v, FastLimit frozen: %d after %v, want %d after the filter's 0.5s", m.deny, got, took, m.code)
			}
		}
		if n := f.rlsErrors(); n != calls {
			t.Errorf("failure_mode_deny %v: Envoy counted %d failed calls, want %d", m.deny, n, calls)
		}
	}
}

// TestEnvoyDeadlineReachesFastLimit freezes Redis (SIGSTOP) under a
// FastLimit that would wait for it up to --store-timeout 60s (and go-redis
// as long, --redis-read-timeout): each call
// ends in FastLimit when Envoy gives up after the filter's 0.5 s (at the
// deadline Envoy's grpc-timeout set, or at the reset Envoy sends then,
// whichever reaches it first), counted as a store failure and logged with
// that cause, within seconds, not after FastLimit's own 60.
func TestEnvoyDeadlineReachesFastLimit(t *testing.T) {
	r := redistest.StartServer(t)
	fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(1000, 1000, "fixed_window")}),
		"--redis-url", "redis://"+r.Addr+"/0", "--store-timeout", "60s", "--redis-read-timeout", "60s")
	f := startHTTPFront(t, "deadline", fl.GRPC, "timeout: 10s", "timeout: 0.5s")
	if r := f.client(t).Do(t, "GET", "/"); r.Code != http.StatusOK {
		t.Fatalf("with Redis up: %d", r.Code)
	}
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Signal(syscall.SIGCONT) }) // before FastLimit stops
	const calls = 2
	start := time.Now()
	if got := f.client(t).Codes(t, calls, "GET", "/"); got[http.StatusOK] != calls {
		t.Fatalf("Redis frozen, failure_mode_deny false: %v", got)
	}
	waitSeries(t, fl, "fastlimit_store_errors_total", calls, 30*time.Second)
	t.Logf("FastLimit counted %d store failures %v after the first call", calls, time.Since(start).Round(time.Millisecond))
	var cause string
	if !wait.True(10*time.Second, func() bool {
		for _, c := range []string{"store timeout", "caller canceled"} {
			if strings.Contains(fl.logs.String(), c) {
				cause = c
				return true
			}
		}
		return false
	}) {
		t.Errorf("FastLimit logged no store timeout or canceled call:\n%s", fl.logs.String())
	}
	t.Logf("FastLimit's log names the cause %q", cause)
}

// TestEnvoySendsDeadline: Envoy's call carries the filter's timeout as its
// gRPC deadline (grpc-timeout), which a gRPC server turns into the call's
// deadline; without a timeout, 20 ms, in the HTTP filter and in the
// network filter alike.
func TestEnvoySendsDeadline(t *testing.T) {
	const noTimeout = "\n                      timeout: 10s"
	for _, tc := range []struct {
		name string
		sub  []string
		want time.Duration
	}{
		{"http 0.75s", []string{"timeout: 10s", "timeout: 0.75s"}, 750 * time.Millisecond},
		{"http default", []string{noTimeout, ""}, 20 * time.Millisecond},
		{"network default", []string{"\n                timeout: 10s", ""}, 20 * time.Millisecond},
	} {
		p := envoytest.StartProbe(t, nil)
		if strings.HasPrefix(tc.name, "http") {
			startHTTPFront(t, "deadline", p.Addr, tc.sub...).client(t).Do(t, "GET", "/")
		} else {
			up := envoytest.StartTCPUpstream(t)
			cfg := envoytest.Substitute(t, envoyTemplate(t, "tcp.yaml"), tc.sub...)
			f := startFront(t, "deadline-tcp", cfg, map[string]string{tmplRLS: p.Addr, tmplTCP: up.Addr})
			if _, err := echoOnce(f.Listener, nextSource()); err != nil {
				t.Fatalf("%s: through Envoy: %v", tc.name, err)
			}
		}
		c := p.WaitCalls(t, 1, 10*time.Second)[0]
		if !c.HasDeadline || c.Deadline > tc.want || c.Deadline <= 0 {
			t.Errorf("%s: the call arrived with %v left (deadline %v), want at most %v", tc.name, c.Deadline, c.HasDeadline, tc.want)
		}
	}
}
