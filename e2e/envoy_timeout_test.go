package e2e_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// timeoutCase is one pairing of the filter's timeout with FastLimit's
// --store-timeout, and what the test asserts of it.
type timeoutCase struct {
	envoy string // the filter's timeout; "" leaves it out (Envoy's 20 ms)
	store string // --store-timeout
	// check asserts on the calls answered by FastLimit's policy and on the
	// median latency; nil only logs them.
	check func(policy int, p50 time.Duration) error
}

// TestEnvoyTimeoutMargin shows what docs/envoy.md says of the filter's
// timeout against FastLimit's --store-timeout. Redis is frozen (SIGSTOP),
// so that every decision waits out the store timeout; FastLimit answers
// by --on-store-error deny (429) and Envoy's failure mode allows (200):
// each answer tells who decided. The circuit breaker, which would answer
// at once after five failures, is kept shut to measure every call.
//
//   - Envoy's default, 20 ms, is below FastLimit's default store timeout,
//     50 ms: Envoy's failure mode decides. FastLimit stops at Envoy's
//     deadline, so its policy answer can still win that race now and then.
//   - Equal timeouts race the same way; the test logs the share.
//   - With Envoy's timeout 50 ms above the store timeout (the examples'
//     0.1s with FastLimit's default 50 ms), FastLimit's policy answers
//     (nearly) every call: all but those whose answer waited longer than
//     the margin for a CPU, which on a busy two-core machine happened to
//     about one call in 40. The shares at margins of 10 and 25 ms are
//     logged. The cases take turns, call by call, so that a busy spell
//     of the machine falls on all of them alike.
func TestEnvoyTimeoutMargin(t *testing.T) {
	const calls = 40
	cases := []timeoutCase{
		{"", "50ms", func(policy int, p50 time.Duration) error {
			if policy > calls/2 || p50 >= 50*time.Millisecond {
				return fmt.Errorf("Envoy's default timeout: FastLimit's policy answered %d of %d, median %v; want Envoy's 20 ms deadline to decide most", policy, calls, p50)
			}
			return nil
		}},
		{"0.05s", "50ms", nil},
		{"0.06s", "50ms", nil},
		{"0.075s", "50ms", nil},
		{"0.1s", "50ms", func(policy int, _ time.Duration) error {
			if policy < calls*9/10 {
				return fmt.Errorf("a 50 ms margin: FastLimit's policy answered %d of %d, want 90%% at least", policy, calls)
			}
			return nil
		}},
	}
	r := redistest.StartServer(t)
	fronts := make([]*httpFront, len(cases))
	clients := make([]*envoytest.Client, len(cases))
	for i, tc := range cases {
		fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(1_000_000, 1, "fixed_window")}),
			"--redis-url", "redis://"+r.Addr+"/0", "--on-store-error", "deny", "--store-timeout", tc.store,
			"--redis-read-timeout", "60s", "--breaker-failures", "1000000")
		sub := []string{"timeout: 10s", "timeout: " + tc.envoy}
		if tc.envoy == "" {
			sub = []string{"\n                      timeout: 10s", ""}
		}
		fronts[i] = startHTTPFront(t, "timeout", fl.GRPC, sub...)
		clients[i] = fronts[i].client(t)
		if code := clients[i].Do(t, "GET", "/").Code; code != http.StatusOK {
			t.Fatalf("with Redis up: %d", code)
		}
	}
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Signal(syscall.SIGCONT) }) // before the servers stop
	policy := make([]int, len(cases))
	lat := make([][]time.Duration, len(cases))
	for range calls {
		for i, tc := range cases {
			start := time.Now()
			switch code := clients[i].Do(t, "GET", "/").Code; code {
			case http.StatusTooManyRequests:
				policy[i]++
			case http.StatusOK:
			default:
				t.Fatalf("envoy %q, store %s: %d", tc.envoy, tc.store, code)
			}
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	var report strings.Builder
	for i, tc := range cases {
		slices.Sort(lat[i])
		p50 := lat[i][calls/2]
		envoy := tc.envoy
		if envoy == "" {
			envoy = "(20ms)"
		}
		fmt.Fprintf(&report, "\n  timeout %-7s --store-timeout %s: FastLimit's policy answered %2d of %d, median %v, max %v",
			envoy, tc.store, policy[i], calls, p50.Round(100*time.Microsecond), lat[i][calls-1].Round(100*time.Microsecond))
		if tc.check != nil {
			if err := tc.check(policy[i], p50); err != nil {
				t.Error(err)
			}
		}
	}
	t.Logf("Redis frozen; who answered:%s", report.String())
}
