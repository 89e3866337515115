package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// TestCheckRulesSettingsOnly: check takes the rules flags alone, lists
// only them in -h, and reads the server's environment without a word
// about its serving settings; the reference's RUNTIME_* still find the
// rules.
func TestCheckRulesSettingsOnly(t *testing.T) {
	root := t.TempDir()
	files.Write(t, filepath.Join(root, "rl", "config", "a.yaml"), "domain: a\n")
	serving := map[string]string{
		"REDIS_URL": "/var/run/nutcracker/ratelimit.sock", "REDIS_SOCKET_TYPE": "unix", "USE_PROMETHEUS": "true",
		"BACKEND_TYPE": "redis", "LOG_LEVEL": "nonsense", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl",
		"RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
	}
	for _, tc := range []struct {
		name       string
		args       []string
		env        map[string]string
		code       int
		out, noOut string // in stdout and stderr together; not in them
	}{
		{"help", []string{"-h"}, nil, 0, "-merge-domain-config", "-redis-url"},
		{"serving flag", []string{"--use-prometheus"}, nil, 2, "flag provided but not defined: -use-prometheus", ""},
		{"server environment", nil, serving, 0, filepath.Join(root, "rl", "config") + ": 1 files, 1 domains, 0 limits: OK", "warning"},
		{"--config over RUNTIME_ROOT", []string{"--config", filepath.Join(root, "rl", "config")}, map[string]string{"RUNTIME_ROOT": root},
			0, "warning: RUNTIME_ROOT: not used, --config gives the setting", "REDIS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code := run(append([]string{"check"}, tc.args...), func(k string) string { return tc.env[k] }, &out, &out)
			if code != tc.code || !strings.Contains(out.String(), tc.out) || (tc.noOut != "" && strings.Contains(out.String(), tc.noOut)) {
				t.Errorf("exit %d, output:\n%s\nwant exit %d with %q and without %q", code, out.String(), tc.code, tc.out, tc.noOut)
			}
		})
	}
}

// TestCheckBadRules: each of these fixtures fails check with its file,
// line and what to do (DIR is the directory checked).
func TestCheckBadRules(t *testing.T) {
	for fixture, want := range map[string]string{
		"missing_requests_per_unit.yaml": "DIR/missing_requests_per_unit.yaml:5: rate_limit has no requests_per_unit, so every request would be over the limit: " +
			"set requests_per_unit (0 to refuse every request), or unlimited: true\n",
		"duplicate_path.yaml": "DIR/duplicate_path.yaml:6: duplicate descriptor 'dup.database_users' (first at DIR/duplicate_path.yaml:3)\n",
		"bad_unit.yaml":       "DIR/bad_unit.yaml:5: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)\n",
		// One error: the missing domain follows from the key.
		"non_string_key.yaml": "DIR/non_string_key.yaml:1: key 1.5 is a number, not a string; the keys here are atomic, descriptors, domain, tenant_key\n",
	} {
		t.Run(fixture, func(t *testing.T) {
			dir := t.TempDir()
			files.Write(t, filepath.Join(dir, fixture), files.Read(t, "../../pkg/rules/testdata/errors/"+fixture))
			var stderr strings.Builder
			code := run([]string{"check", "--config", dir}, func(string) string { return "" }, io.Discard, &stderr)
			if want = strings.ReplaceAll(want, "DIR", dir); code != 1 || stderr.String() != want {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1, stderr:\n%s", code, stderr.String(), want)
			}
		})
	}
}

// TestCheckReportsGroups: a rule with several limits (rate_limits) gets a
// line naming each of them.
func TestCheckReportsGroups(t *testing.T) {
	dir := t.TempDir()
	rules := "domain: api\ndescriptors:\n  - key: account\n    rate_limits:\n" +
		"      - {unit: second, requests_per_unit: 10}\n      - {name: daily, unit: day, requests_per_unit: 1000}\n"
	files.Write(t, filepath.Join(dir, "a.yaml"), rules)
	var stdout, stderr strings.Builder
	if code := run([]string{"check", "--config", dir}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := dir + ": 1 files, 1 domains, 2 limits: OK\n  api.account: 2 limits, each must allow: api.account#0, api.account#daily\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}

// TestCheckWarns: keys of the reference's valid set where they mean
// nothing load, and check names each with its line, exiting 0.
func TestCheckWarns(t *testing.T) {
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "a.yaml"), "name: eg/http\ndomain: a\ndescriptors:\n  - key: k\n    unit: minute\n"+
		"    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	var stdout, stderr strings.Builder
	if code := run([]string{"check", "--config", dir}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := "warning: " + dir + "/a.yaml:1: 'name' means nothing in a rules file's top level and is ignored, as envoyproxy/ratelimit ignores it\n" +
		"warning: " + dir + "/a.yaml:5: 'unit' means nothing in a descriptor and is ignored, as envoyproxy/ratelimit ignores it; " +
		"unit belongs in rate_limit (line 6): indent it below rate_limit\n"
	if stderr.String() != want || !strings.Contains(stdout.String(), "1 files, 1 domains, 1 limits: OK") {
		t.Errorf("stdout:\n%s\nstderr:\n%s\nwant stderr:\n%s", stdout.String(), stderr.String(), want)
	}
}

// TestCheckOverlay: --rules-overlay (or RULES_OVERLAY) checks the overlay
// of rules over xDS, its errors with file and line.
func TestCheckOverlay(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	files.Write(t, good, "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {algorithm: token_bucket, burst: 5}\n")
	files.Write(t, bad, "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {unit: second}\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		out  string
	}{
		{"good", []string{"--rules-overlay", good}, nil, 0, good + ": rules overlay of 1 domains: OK\n"},
		{"good, from the environment", nil, map[string]string{"RULES_OVERLAY": good}, 0, good + ": rules overlay of 1 domains: OK\n"},
		{"bad", []string{"--rules-overlay", bad}, nil, 1,
			bad + ":5: the overlay holds FastLimit's extensions only: unit comes from the rules over xDS\n"},
		{"missing", []string{"--rules-overlay", filepath.Join(dir, "none.yaml")}, nil, 1, "read rules overlay: open "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code := run(append([]string{"check"}, tc.args...), func(k string) string { return tc.env[k] }, &out, &out)
			if code != tc.code || !strings.HasPrefix(out.String(), tc.out) {
				t.Errorf("exit %d, output:\n%s\nwant exit %d, output starting %q", code, out.String(), tc.code, tc.out)
			}
		})
	}
}
