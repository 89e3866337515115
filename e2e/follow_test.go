package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The follow tests change the rules the way deployments do and the issue
// found unseen: a git-sync symlink swap of --config, the directory
// removed and created again, a rules file far too large.

// followWithin is the bound from a change to the new rules
// answering.
const followWithin = 2 * time.Second

// swapRules is a domain whose one limit is rpu per hour, visible in every
// answer's current_limit.
func swapRules(domain string, rpu int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", domain, rpu)
}

// limitOf returns the requests_per_unit the server answers domain's key
// with, 0 when no rule matches or the call fails.
func limitOf(t *testing.T, srv *fastlimit, domain string) uint32 {
	t.Helper()
	resp, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest(domain, "probe", "k"))
	if err != nil {
		return 0
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// inEffect measures how long after since the server answers domain with
// rpu, failing past followWithin (and giving up after 10 s).
func inEffect(t *testing.T, srv *fastlimit, domain string, rpu uint32, since time.Time, what string) {
	t.Helper()
	for limitOf(t, srv, domain) != rpu {
		if time.Since(since) > 10*time.Second {
			t.Fatalf("%s: %s not answering %d after 10 s", what, domain, rpu)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(since)
	t.Logf("%s: in effect after %v", what, took.Round(time.Millisecond))
	if took > followWithin {
		t.Errorf("%s: in effect after %v, want within %v", what, took, followWithin)
	}
}

func writeDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		writeFileT(t, filepath.Join(dir, name), body)
	}
}

// TestReloadGitSyncSwap runs with --config a symlink to a checkout, as
// git-sync lays it out, and swaps the symlink to a new checkout that
// changes one domain and drops another: the new rules answer within 2 s,
// the dropped domain is warned of and counted, and the old checkout's
// removal changes nothing.
func TestReloadGitSyncSwap(t *testing.T) {
	base := t.TempDir()
	writeDir(t, filepath.Join(base, ".worktrees", "r1"), map[string]string{
		"swap.yaml": swapRules("swap", 10), "gone.yaml": swapRules("gone", 5)})
	writeDir(t, filepath.Join(base, ".worktrees", "r2"), map[string]string{"swap.yaml": swapRules("swap", 20)})
	link := filepath.Join(base, "link")
	if err := os.Symlink(".worktrees/r1", link); err != nil {
		t.Fatal(err)
	}
	admin := loopback(t)
	srv := start(t, launch{rules: link, flags: []string{"--admin-addr", admin}})
	if got := limitOf(t, srv, "gone"); got != 5 {
		t.Fatalf("domain gone answers %d before the swap", got)
	}

	tmp := filepath.Join(base, "link.tmp")
	if err := os.Symlink(".worktrees/r2", tmp); err != nil {
		t.Fatal(err)
	}
	swapped := time.Now()
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	inEffect(t, srv, "swap", 20, swapped, "git-sync swap")
	if got := limitOf(t, srv, "gone"); got != 0 {
		t.Errorf("the dropped domain still answers with a limit of %d", got)
	}
	waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(srv.logs.String(), "domain removed from the rules")
	})
	if logs := srv.logs.String(); !strings.Contains(logs, `"domain": "gone"`) {
		t.Errorf("the removed domain is not named in the warning:\n%s", logs)
	}
	if n := metricValue(t, scrape(t, admin), "fastlimit_config_domains_removed_total"); n != 1 {
		t.Errorf("fastlimit_config_domains_removed_total = %v, want 1", n)
	}
	if err := os.RemoveAll(filepath.Join(base, ".worktrees", "r1")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if got := limitOf(t, srv, "swap"); got != 20 {
		t.Errorf("after the old checkout's removal, swap answers %d", got)
	}
}

// TestReloadDirectoryRecreated removes the rules directory and creates it
// again with new rules (rm -rf, mkdir, a file written in place), at once
// and at a human's pace: the new rules answer within 2 s of the write.
func TestReloadDirectoryRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rules")
	writeDir(t, dir, map[string]string{"swap.yaml": swapRules("swap", 10)})
	srv := start(t, launch{rules: dir})
	for i, pause := range []time.Duration{0, 700 * time.Millisecond} {
		rpu := 30 + 10*i
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		written := time.Now()
		writeFileT(t, filepath.Join(dir, "swap.yaml"), swapRules("swap", rpu))
		inEffect(t, srv, "swap", uint32(rpu), written, fmt.Sprintf("re-created, pause %v", pause))
	}
}

// TestRulesFileOverLimit adds a 50 MB rules file (sparse: written in no
// time) beside good rules: the reload is refused at once, naming the file
// and the limit, the failure shows in the metrics, and the last good
// rules keep deciding; removing it loads again.
func TestRulesFileOverLimit(t *testing.T) {
	dir := writeRules(t, map[string]string{"swap.yaml": swapRules("swap", 10)})
	admin := loopback(t)
	srv := start(t, launch{rules: dir, flags: []string{"--admin-addr", admin}})
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(50 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	failure := `fastlimit_config_loads_total{result="failure"}`
	waitFor(t, 10*time.Second, func() bool { return metricValue(t, scrape(t, admin), failure) >= 1 })
	m := scrape(t, admin)
	if v := metricValue(t, m, "fastlimit_config_last_reload_successful"); v != 0 {
		t.Errorf("fastlimit_config_last_reload_successful = %v after the refusal", v)
	}
	if logs := srv.logs.String(); !strings.Contains(logs, big) || !strings.Contains(logs, "over the limit of 8388608 bytes") {
		t.Errorf("the refusal does not name the file and the limit:\n%s", logs)
	}
	if got := limitOf(t, srv, "swap"); got != 10 {
		t.Errorf("the last good rules answer %d, want 10", got)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		return metricValue(t, scrape(t, admin), "fastlimit_config_last_reload_successful") == 1
	})
}
