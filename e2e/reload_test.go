package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// reloadRules is a domain whose one limit is rpu per hour: high enough
// that load never reaches it, and visible in every answer's current_limit.
func reloadRules(rpu int) string {
	return fmt.Sprintf("domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", rpu)
}

// badReloadRules fails validation at line 4.
const badReloadRules = "domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"

// inEffectWithin bounds how long an edit may take to show in answers.
const inEffectWithin = time.Second

// load calls ShouldRateLimit from several goroutines until stopped and
// counts calls and failures.
type load struct {
	calls, failures atomic.Int64
	firstErr        atomic.Value // string
	stop            chan struct{}
	wg              sync.WaitGroup
}

func startLoad(t *testing.T, client rls.RateLimitServiceClient, workers int) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			req := &rls.RateLimitRequest{Domain: "reload", Descriptors: []*common.RateLimitDescriptor{desc("k", fmt.Sprint("worker-", w))}}
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				resp, err := client.ShouldRateLimit(ctx, req)
				cancel()
				l.calls.Add(1)
				if err == nil && resp.GetStatuses()[0].GetCurrentLimit() == nil {
					err = fmt.Errorf("no current_limit in %v", resp)
				}
				if err != nil {
					l.failures.Add(1)
					l.firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop stops the load and waits for it (idempotent).
func (l *load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// currentLimit returns the requests_per_unit the server answers with now.
func currentLimit(t *testing.T, client rls.RateLimitServiceClient) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "reload", Descriptors: []*common.RateLimitDescriptor{desc("k", "probe")}})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// timeToEffect runs edit, then measures how long until the server answers
// with requests_per_unit want, and fails past inEffectWithin.
func timeToEffect(t *testing.T, client rls.RateLimitServiceClient, want uint32, edit func()) time.Duration {
	t.Helper()
	start := time.Now()
	edit()
	for {
		if currentLimit(t, client) == want {
			took := time.Since(start)
			if took >= inEffectWithin {
				t.Fatalf("edit to %d took %s to take effect, want < %s", want, took, inEffectWithin)
			}
			return took
		}
		if time.Since(start) > 5*inEffectWithin {
			t.Fatalf("edit to %d not in effect after %s", want, time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReloadUnderLoad edits the rules (good, bad, good) of a server under
// continuous gRPC load: no request fails, each good edit is in effect
// within a second, and the bad one leaves the old rules serving, ready,
// with the error logged with file and line and counted.
func TestReloadUnderLoad(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		dir := writeRules(t, map[string]string{"reload.yaml": reloadRules(1_000_000)})
		path := filepath.Join(dir, "reload.yaml")
		admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		srv := startServer(t, dir, true, append(extra, "--admin-addr", admin)...)
		if got := currentLimit(t, srv.Client); got != 1_000_000 {
			t.Fatalf("initial limit %d", got)
		}
		l := startLoad(t, srv.Client, 4)
		time.Sleep(200 * time.Millisecond) // load running before the first edit

		took1 := timeToEffect(t, srv.Client, 2_000_000, func() { replaceFileT(t, path, reloadRules(2_000_000)) })

		failuresBefore := metricValue(t, scrape(t, admin), `fastlimit_config_loads_total{result="failure"}`)
		replaceFileT(t, path, badReloadRules)
		waitFor(t, 5*time.Second, func() bool {
			return metricValue(t, scrape(t, admin), `fastlimit_config_loads_total{result="failure"}`) > failuresBefore
		})
		if got := currentLimit(t, srv.Client); got != 2_000_000 {
			t.Fatalf("limit %d after a bad edit, want the old 2000000", got)
		}
		if code := httpStatus(t, "http://"+srv.HTTP+"/ready"); code != http.StatusOK {
			t.Fatalf("/ready %d after a bad edit", code)
		}
		if v := metricValue(t, scrape(t, admin), "fastlimit_config_last_reload_successful"); v != 0 {
			t.Fatalf("last_reload_successful %v after a bad edit", v)
		}
		if logs := srv.logs.String(); !strings.Contains(logs, "rules reload failed") || !strings.Contains(logs, path+":4:") {
			t.Fatalf("bad edit not logged with file and line:\n%s", logs)
		}

		took2 := timeToEffect(t, srv.Client, 3_000_000, func() { replaceFileT(t, path, reloadRules(3_000_000)) })

		time.Sleep(200 * time.Millisecond) // load running after the last edit
		l.Stop()
		if n := l.failures.Load(); n != 0 {
			t.Fatalf("%d of %d requests failed during reloads; first: %v", n, l.calls.Load(), l.firstErr.Load())
		}
		if l.calls.Load() < 100 {
			t.Fatalf("only %d requests: the load did not run", l.calls.Load())
		}
		if v := metricValue(t, scrape(t, admin), "fastlimit_config_last_reload_successful"); v != 1 {
			t.Fatalf("last_reload_successful %v after the good edit", v)
		}
		t.Logf("%d requests, 0 failed; good edits in effect after %s and %s", l.calls.Load(), took1, took2)
	})
}

// TestReloadConfigMapSwap lays the rules out as a Kubernetes ConfigMap
// volume (visible symlinks into a "..data" symlink to a timestamped
// directory) and updates them as the kubelet does: a new directory, a new
// symlink renamed over "..data", the old directory removed.
func TestReloadConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	swap := configMapVolume(t, dir, "reload.yaml")
	swap(reloadRules(1_000))
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	srv := startServer(t, dir, true, "--admin-addr", admin)
	if got := currentLimit(t, srv.Client); got != 1_000 {
		t.Fatalf("initial limit %d", got)
	}
	l := startLoad(t, srv.Client, 2)

	took := timeToEffect(t, srv.Client, 2_000, func() { swap(reloadRules(2_000)) })

	failures := metricValue(t, scrape(t, admin), `fastlimit_config_loads_total{result="failure"}`)
	swap(badReloadRules)
	waitFor(t, 5*time.Second, func() bool {
		return metricValue(t, scrape(t, admin), `fastlimit_config_loads_total{result="failure"}`) > failures
	})
	if got := currentLimit(t, srv.Client); got != 2_000 {
		t.Fatalf("limit %d after a bad ConfigMap, want the old 2000", got)
	}
	took2 := timeToEffect(t, srv.Client, 3_000, func() { swap(reloadRules(3_000)) })

	l.Stop()
	if n := l.failures.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed; first: %v", n, l.calls.Load(), l.firstErr.Load())
	}
	if logs := srv.logs.String(); !strings.Contains(logs, "rules reload failed") || !strings.Contains(logs, filepath.Join(dir, "reload.yaml")+":4:") {
		t.Fatalf("bad ConfigMap not logged at the visible file's line:\n%s", logs)
	}
	t.Logf("%d requests, 0 failed; swaps in effect after %s and %s", l.calls.Load(), took, took2)
}

// configMapVolume makes dir a ConfigMap-style volume holding one file,
// name, and returns a function that atomically swaps in new content.
func configMapVolume(t *testing.T, dir, name string) func(body string) {
	t.Helper()
	version := 0
	return func(body string) {
		t.Helper()
		version++
		ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", version, version)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFileT(t, filepath.Join(dir, ts, name), body)
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if version == 1 {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// replaceFileT replaces path atomically, the way docs/operations.md advises: a
// temporary dotfile beside it, renamed into place. (A write in place
// reloads only after 1 s of quiet.)
func replaceFileT(t *testing.T, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	writeFileT(t, tmp, body)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func writeFileT(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
