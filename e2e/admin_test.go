package e2e_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// wantSeries checks the value of each series on a Prometheus text page; a
// series that does not appear reads 0.
func wantSeries(t *testing.T, page string, want map[string]float64) {
	t.Helper()
	got := scrape.Series(t, page)
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
}

// metricsPage returns the text of http://addr/metrics.
func metricsPage(t *testing.T, addr string) string {
	t.Helper()
	code, body := scrape.Get(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s/metrics: %d %s", addr, code, body)
	}
	return body
}

// TestAdminSurface checks the admin listener of the real binary: metrics
// that pass promlint and count decisions per rule, the rules dump, and
// usage peeks that consume nothing, on both stores.
func TestAdminSurface(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		admin := loopback.Addr(t)
		srv := startServer(t, files.Dir(t, map[string]string{"adm.yaml": adminRules}), true, append(extra, "--admin-addr", admin)...)
		ctx := ctxTimeout(t, 30*time.Second)
		id := fmt.Sprint(time.Now().UnixNano())
		for _, req := range []*rls.RateLimitRequest{
			domainRequest("adm", id, "win"), domainRequest("adm", id, "win"), domainRequest("adm", id, "bucket"), domainRequest("adm", "alice", "user"),
		} {
			if _, err := srv.Client.ShouldRateLimit(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		for range 6 { // 5 allowed, the 6th over
			if _, err := srv.Client.ShouldRateLimit(ctx, domainRequest("adm", id+"-over", "win")); err != nil {
				t.Fatal(err)
			}
		}

		body := metricsPage(t, admin)
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
		wantSeries(t, body, map[string]float64{
			`fastlimit_rule_total_hits_total{domain="adm",rule="adm.win"}`:    8,
			`fastlimit_rule_within_limit_total{domain="adm",rule="adm.win"}`:  7,
			`fastlimit_rule_over_limit_total{domain="adm",rule="adm.win"}`:    1,
			`fastlimit_rule_near_limit_total{domain="adm",rule="adm.win"}`:    2, // 1 and 0 left: <= (1-0.8)*5
			`fastlimit_rule_total_hits_total{domain="adm",rule="adm.bucket"}`: 1,
			`fastlimit_requests_total{code="OK"}`:                             9,
			`fastlimit_requests_total{code="OVER_LIMIT"}`:                     1,
			`fastlimit_request_duration_seconds_count`:                        10,
			`fastlimit_config_loads_total{result="success"}`:                  1,
			`fastlimit_config_last_reload_successful`:                         1,
			`fastlimit_config_limits`:                                         3,
			`fastlimit_store_errors_total`:                                    0,
			`fastlimit_config_loads_total{result="failure"}`:                  0,
			`fastlimit_rule_shadow_mode_total{domain="adm",rule="adm.win"}`:   0,
		})
		// detailed_metric labels the rule with the request's values when the
		// observer is given them, and with the rule's path otherwise.
		if got := scrape.Value(t, body, `fastlimit_rule_total_hits_total{domain="adm",rule="adm.user"}`) +
			scrape.Value(t, body, `fastlimit_rule_total_hits_total{domain="adm",rule="adm.user_alice"}`); got != 1 {
			t.Errorf("detailed_metric rule hits = %v, want 1", got)
		}
		if !strings.Contains(body, `fastlimit_config_info{hash="`) || !strings.Contains(body, "process_start_time_seconds") {
			t.Errorf("/metrics lacks config_info or process metrics:\n%s", body)
		}

		code, dump := scrape.Get(t, "http://"+admin+"/v1/rules")
		if code != http.StatusOK || !strings.Contains(dump, "adm.win: algorithm=fixed_window unit=HOUR requests_per_unit=5 ") ||
			!strings.Contains(dump, "adm.bucket: algorithm=token_bucket unit=HOUR requests_per_unit=1 unit_multiplier=1 burst=10 ") {
			t.Errorf("/v1/rules: %d\n%s", code, dump)
		}
		// The reference's layout at /rlconfig.
		code, dump = scrape.Get(t, "http://"+admin+"/rlconfig")
		if code != http.StatusOK || !strings.Contains(dump, "adm.win: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false\n") ||
			strings.Contains(dump, "algorithm=") || strings.Contains(dump, "#") {
			t.Errorf("/rlconfig: %d\n%s", code, dump)
		}

		for range 2 { // peeking twice sees the same: nothing consumed
			var u struct {
				Matched   bool    `json:"matched"`
				Rule      string  `json:"rule"`
				Remaining *uint32 `json:"remaining"`
				ResetMs   *int64  `json:"reset_ms"`
				Tokens    *uint32 `json:"tokens"`
			}
			usage := func(desc string) {
				t.Helper()
				u.Remaining, u.Tokens, u.ResetMs = nil, nil, nil
				code, body := scrape.Get(t, "http://"+admin+"/v1/usage?domain=adm&descriptor="+desc)
				if code != http.StatusOK {
					t.Fatalf("usage %s: %d %s", desc, code, body)
				}
				if err := json.Unmarshal([]byte(body), &u); err != nil {
					t.Fatal(err)
				}
			}
			usage("win=" + id)
			if !u.Matched || u.Rule != "adm.win" || u.Remaining == nil || *u.Remaining != 3 || u.ResetMs == nil || *u.ResetMs <= 0 {
				t.Fatalf("usage of win: %+v", u)
			}
			usage("bucket=" + id)
			if !u.Matched || u.Tokens == nil || *u.Tokens != 9 {
				t.Fatalf("usage of bucket: %+v", u)
			}
			usage("nothing=here")
			if u.Matched {
				t.Fatalf("usage of an unmatched descriptor: %+v", u)
			}
		}
		// Without --pprof, /debug/pprof/ is no profile: like any path not
		// served, it gets the index, as the reference's debug listener.
		if code, body := scrape.Get(t, "http://"+admin+"/debug/pprof/"); code != http.StatusOK ||
			strings.Contains(body, "goroutine") || !strings.Contains(body, "/rlconfig: print out the currently loaded configuration for debugging\n") {
			t.Errorf("/debug/pprof/ without --pprof: %d\n%s", code, body)
		}
		// Peeks are not requests: the counters did not move.
		if got := scrape.Value(t, metricsPage(t, admin), `fastlimit_rule_total_hits_total{domain="adm",rule="adm.win"}`); got != 8 {
			t.Errorf("total_hits after peeks = %v, want 8", got)
		}
	})
}

func TestAdminPprof(t *testing.T) {
	admin := loopback.Addr(t)
	startServer(t, files.Dir(t, map[string]string{"adm.yaml": adminRules}), true, "--admin-addr", admin, "--pprof")
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1"} {
		if code := httpCode(admin + path); code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
	}
}

// TestAdminDrainThenStop: SIGTERM fails readiness at once, keeps answering
// gRPC for the drain period, then exits cleanly.
func TestAdminDrainThenStop(t *testing.T) {
	admin := loopback.Addr(t)
	srv := startServer(t, files.Dir(t, map[string]string{"adm.yaml": adminRules}), true,
		"--admin-addr", admin, "--drain", "1s")
	cmd := srv.cmd
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 500*time.Millisecond, func() bool { return httpCode(srv.HTTP+"/ready") == http.StatusServiceUnavailable })
	ctx := ctxTimeout(t, 5*time.Second)
	if _, err := srv.Client.ShouldRateLimit(ctx, domainRequest("adm", "drain", "win")); err != nil {
		t.Fatalf("gRPC during drain: %v", err)
	}
	if code := httpCode(admin + "/metrics"); code != http.StatusOK {
		t.Fatalf("admin during drain: %d", code)
	}
	err := waitExit(t, srv.p, 10*time.Second)
	if err != nil {
		t.Fatalf("exit after drain: %v\n%s", err, srv.logs.String())
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("exited %s after SIGTERM, before the 1s drain ended", took)
	}
}

// TestAdminSecondSignalExitsAtOnce: a second SIGTERM during the drain ends the
// process without waiting.
func TestAdminSecondSignalExitsAtOnce(t *testing.T) {
	admin := loopback.Addr(t)
	srv := startServer(t, files.Dir(t, map[string]string{"adm.yaml": adminRules}), true,
		"--admin-addr", admin, "--drain", "30s")
	cmd := srv.cmd
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 2*time.Second, func() bool { return httpCode(srv.HTTP+"/ready") == http.StatusServiceUnavailable })
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := waitExit(t, srv.p, 5*time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("second SIGTERM took %s to end the process", took)
	}
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) {
		t.Fatalf("exit after a second signal: %v", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("process ended by %v, want SIGTERM", ee)
	}
}

// waitExit waits for p to exit, killing it after d.
func waitExit(t *testing.T, p *child.Process, d time.Duration) error {
	t.Helper()
	select {
	case <-p.Exited():
		return p.Wait()
	case <-time.After(d):
		p.Kill()
		t.Fatalf("process did not exit within %s", d)
		return nil
	}
}
