package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

func rulesYAML(rpu int) string {
	return fmt.Sprintf("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", rpu)
}

const badYAML = "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"

// newTestRules is a rules source of dir, counted by metrics on the
// returned registry.
func newTestRules(t testing.TB, dir string) (*ruleSource, *limiter.Limiter, *prometheus.Registry, *zapobserver.ObservedLogs) {
	t.Helper()
	core, logs := zapobserver.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.New(store.NewMemory(store.MemoryOptions{}), limiter.Options{})
	return newRuleSource(settings.RulesLayout{Dir: dir}, l, m, zap.New(core)), l, reg, logs
}

func TestRulesLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.yaml")
	files.Write(t, path, rulesYAML(1))
	r, l, reg, logs := newTestRules(t, dir)
	ctx := context.Background()

	if changed, err := r.load(); err != nil || !changed {
		t.Fatalf("first load: %v, %v", changed, err)
	}
	first := l.Rules()
	hash := r.Current().Hash

	// Unchanged content: no swap.
	r.reload(ctx, "test")
	if l.Rules() != first {
		t.Fatal("a no-op reload swapped the rules")
	}

	// A bad edit keeps the rules, logs once with file and line, counts.
	files.Write(t, path, badYAML)
	r.reload(ctx, "test")
	if l.Rules() != first || r.Current().Hash != hash {
		t.Fatal("a bad edit replaced the rules")
	}
	failed := logs.FilterMessage("rules reload failed; the rules in force stay").All()
	if len(failed) != 1 {
		t.Fatalf("%d failure log lines, want 1; all: %v", len(failed), logs.All())
	}
	errs := fmt.Sprint(failed[0].ContextMap()[logErrors])
	if !strings.Contains(errs, path+":4:") || !strings.Contains(errs, "fortnight") {
		t.Fatalf("failure log does not locate the error: %s", errs)
	}
	if got := metricValue(t, reg, "fastlimit_config_loads_total", "result", "failure"); got != 1 {
		t.Fatalf("failures = %v", got)
	}
	if got := metricValue(t, reg, "fastlimit_config_last_reload_successful"); got != 0 {
		t.Fatalf("last_reload_successful = %v", got)
	}

	// A good edit swaps, logs once and exports the new hash.
	files.Write(t, path, rulesYAML(2))
	r.reload(ctx, "test")
	if l.Rules() == first {
		t.Fatal("a good edit did not swap the rules")
	}
	if got := l.Rules().Limits()[0].RequestsPerUnit; got != 2 {
		t.Fatalf("requests_per_unit %d after reload", got)
	}
	if n := logs.FilterMessage("rules reloaded").Len(); n != 1 {
		t.Fatalf("%d reload log lines", n)
	}
	if got := metricValue(t, reg, "fastlimit_config_info", "hash", r.Current().Hash); got != 1 || r.Current().Hash == hash {
		t.Fatalf("config_info for the new hash = %v", got)
	}
	if got := metricValue(t, reg, "fastlimit_config_last_reload_successful"); got != 1 {
		t.Fatalf("last_reload_successful = %v", got)
	}
	// Nothing logged at info or above for the no-op.
	for _, e := range logs.All() {
		if e.Level >= zapcore.InfoLevel && e.Message != "rules reloaded" && e.Message != "rules reload failed; the rules in force stay" {
			t.Errorf("unexpected log: %s", e.Message)
		}
	}
}

func TestRulesFirstLoadFails(t *testing.T) {
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "r.yaml"), badYAML)
	r, l, _, _ := newTestRules(t, dir)
	if _, err := r.load(); err == nil {
		t.Fatal("bad rules loaded")
	}
	if l.Rules() != nil || r.Current() != nil {
		t.Fatal("rules set after a failed first load")
	}
	r.reload(context.Background(), "test") // logs without rules in force: must not panic
}

// clockedServer is testServer with its rules watcher on a fake clock.
func clockedServer(t *testing.T, rules map[string]string) (*Server, string, *clock.Clock) {
	t.Helper()
	dir := files.Dir(t, rules)
	s := newServer(t, zaptest.NewLogger(t), loopbackArgs(dir)...)
	clk := clock.New(time.Now())
	s.clock = clk
	if err := s.Open(context.Background()); err != nil {
		_ = s.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s, dir, clk
}

// stepUntil advances clk to the rules watcher's next debounce or settle
// time (never to its content check), one at a time as the watcher arms
// them, until cond holds; it fails after 30 s of real time. seen, if not
// nil, is called after each step.
func stepUntil(t *testing.T, clk *clock.Clock, cond func() bool, seen func()) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within 30 s (clock timers pending: %v)", clk.Pending())
		}
		p := clk.Pending()
		if len(p) == 0 || p[0] > reload.DefaultSettle {
			<-time.After(time.Millisecond) // an event on its way
			continue
		}
		s := clk.Started()
		clk.Advance(p[0])
		// The watcher arms its next timer, or reloads.
		for clk.Started() == s && !cond() && time.Now().Before(deadline) {
			<-time.After(time.Millisecond)
		}
		if seen != nil {
			seen()
		}
	}
}

// TestServerReloads edits the rules of a running server: file changes and
// SIGHUP both take effect, and a bad edit keeps the server ready.
func TestServerReloads(t *testing.T) {
	// r.yaml links to a file elsewhere: edits to the target are invisible
	// to the watcher, so only SIGHUP can pick them up.
	target := filepath.Join(t.TempDir(), "linked.yaml")
	files.Write(t, target, rulesYAML(100))
	s, dir, clk := clockedServer(t, map[string]string{"r.yaml": rulesYAML(10)})
	path := filepath.Join(dir, "r.yaml")
	limit := func() uint32 {
		resp, err := s.service.ShouldRateLimit(context.Background(), rlsRequest("r", "k", "v"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	files.Write(t, path, rulesYAML(20))
	stepUntil(t, clk, func() bool { return limit() == 20 }, nil)

	files.Write(t, path, badYAML)
	stepUntil(t, clk, func() bool { return metricValue(t, s.registry, "fastlimit_config_last_reload_successful") == 0 }, nil)
	if got := limit(); got != 20 {
		t.Fatalf("limit %d after a bad edit", got)
	}
	if err := s.healthy(context.Background()); err != nil {
		t.Fatalf("not healthy after a bad edit: %v", err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	stepUntil(t, clk, func() bool { return limit() == 100 }, nil)
	// The clock stands still from here: the watcher's debounce and content
	// check cannot reload, only SIGHUP can.
	files.Write(t, target, rulesYAML(30))
	if got := limit(); got != 100 {
		t.Fatalf("limit %d: the watcher saw an edit outside the directory", got)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() bool { return limit() == 30 })
}

// TestRulesFileWrittenInTwoPieces writes a rules file in place in two
// pieces half the watcher's settle time (1 s) apart; the first piece
// alone parses (requests_per_unit 5 of the final 50). The half-written
// file is never live: the limit goes from 10 straight to 50.
func TestRulesFileWrittenInTwoPieces(t *testing.T) {
	s, dir, clk := clockedServer(t, map[string]string{"r.yaml": rulesYAML(10)})
	limit := func() uint32 {
		resp, err := s.service.ShouldRateLimit(context.Background(), rlsRequest("r", "k", "v"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	seen := map[uint32]int{}
	see := func() { seen[limit()]++ }
	debounced := func(p []time.Duration) bool { return len(p) > 0 && p[0] == reload.DefaultDebounce }
	f, err := os.OpenFile(filepath.Join(dir, "r.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 5"); err != nil {
		t.Fatal(err)
	}
	clk.WaitFor(t, "the debounce of the first piece", debounced)
	clk.Advance(reload.DefaultDebounce)
	// The watcher takes a fingerprint and waits for the settle time; a
	// reload now would put the half-written file live.
	wait.For(t, 30*time.Second, func() bool { return limit() != 10 || slices.Contains(clk.Pending(), reload.DefaultSettle) })
	clk.Advance(reload.DefaultSettle / 2)
	see()
	if _, err := f.WriteString("0\n"); err != nil {
		t.Fatal(err)
	}
	clk.WaitFor(t, "the debounce of the second piece", debounced)
	stepUntil(t, clk, func() bool { return limit() == 50 }, see)
	if seen[5] != 0 || seen[10] == 0 {
		t.Fatalf("limits seen (value: times): %v; want 10 then 50, never the half-written 5", seen)
	}
}

// TestEmptyRulesDirectory: a rules directory without rules files (an
// image without rules, a ConfigMap mounted elsewhere) is served, as the
// reference serves it: a warning says so, every request is OK, health
// waits for rules with --health-requires-rules, and
// files that appear are loaded.
func TestEmptyRulesDirectory(t *testing.T) {
	for _, oneConfig := range []bool{false, true} {
		t.Run(fmt.Sprint("one config ", oneConfig), func(t *testing.T) {
			dir := t.TempDir()
			core, logs := zapobserver.New(zap.InfoLevel)
			var args []string
			if oneConfig {
				args = append(args, "--health-requires-rules")
			}
			s := testServerOn(t, dir, zap.New(core), args...)
			if logs.FilterMessageSnippet("no rules files").Len() != 1 {
				t.Errorf("no warning about the empty directory: %v", logs.All())
			}
			resp, err := s.service.ShouldRateLimit(context.Background(), rlsRequest("adm", "win", "x"))
			if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Errorf("with no rules: %v, %v; want OK without a limit", resp, err)
			}
			wantHealth := http.StatusOK
			if oneConfig {
				wantHealth = http.StatusServiceUnavailable
			}
			if code, _ := scrape.Get(t, "http://"+s.HTTPAddr()+"/healthcheck"); code != wantHealth {
				t.Errorf("/healthcheck %d, want %d", code, wantHealth)
			}
			files.Write(t, filepath.Join(dir, "adm.yaml"), adminRules)
			// The rules file that appeared is loaded.
			wait.For(t, 10*time.Second, func() bool {
				r, err := s.service.ShouldRateLimit(context.Background(), rlsRequest("adm", "win", "x"))
				return err == nil && r.GetStatuses()[0].GetCurrentLimit() != nil
			})
			if code, _ := scrape.Get(t, "http://"+s.HTTPAddr()+"/healthcheck"); code != http.StatusOK {
				t.Errorf("/healthcheck %d with rules, want 200", code)
			}
		})
	}
}

// TestRemovedDomainsWarned: a reload that drops domains warns once per
// domain, with the cause, and tells onRemoved; one that keeps them does
// not.
func TestRemovedDomainsWarned(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "b", "c"} {
		files.Write(t, filepath.Join(dir, d+".yaml"), strings.Replace(rulesYAML(1), "domain: r", "domain: "+d, 1))
	}
	r, _, _, logs := newTestRules(t, dir)
	var told []string
	r.onRemoved = func(ds []string) { told = append(told, ds...) }
	if _, err := r.load(); err != nil {
		t.Fatal(err)
	}
	files.Write(t, filepath.Join(dir, "a.yaml"), strings.Replace(rulesYAML(2), "domain: r", "domain: a", 1))
	r.reload(context.Background(), "test")
	if len(told) != 0 || logs.FilterMessageSnippet("domain removed").Len() != 0 {
		t.Fatalf("a reload that kept every domain warned: %v", told)
	}
	for _, d := range []string{"b", "c"} {
		if err := os.Remove(filepath.Join(dir, d+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	r.reload(context.Background(), "change")
	warned := logs.FilterMessageSnippet("domain removed").All()
	if fmt.Sprint(told) != "[b c]" || len(warned) != 2 {
		t.Fatalf("told %v, %d warnings; want [b c] and 2", told, len(warned))
	}
	for i, w := range warned {
		if w.Level != zapcore.WarnLevel || w.ContextMap()[logDomain] != told[i] || w.ContextMap()[logCause] != "change" {
			t.Errorf("warning %d: %v %v", i, w.Level, w.ContextMap())
		}
	}
}
