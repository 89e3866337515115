package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckWarnsDeprecated: a deprecated flag is named, with the flag to
// use, in one warning; the reference's variable of the same setting is not.
func TestCheckWarnsDeprecated(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--use-prometheus"}, nil, "warning: --use-prometheus is deprecated: use --prometheus\n"},
		{nil, map[string]string{"USE_PROMETHEUS": "true"}, ""},
	} {
		var stderr strings.Builder
		args := append([]string{"check", "--config", dir}, tc.args...)
		if code := run(args, func(k string) string { return tc.env[k] }, io.Discard, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		if got := stderr.String(); strings.Count(got, "deprecated") != strings.Count(tc.want, "deprecated") || !strings.Contains(got, tc.want) {
			t.Errorf("%v %v: stderr %q, want %q", tc.args, tc.env, got, tc.want)
		}
	}
}

// TestCheckReportsGroups: a rule with several limits (rate_limits) gets a
// line naming each of them.
func TestCheckReportsGroups(t *testing.T) {
	dir := t.TempDir()
	rules := "domain: api\ndescriptors:\n  - key: account\n    rate_limits:\n" +
		"      - {unit: second, requests_per_unit: 10}\n      - {name: daily, unit: day, requests_per_unit: 1000}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"check", "--config", dir}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := dir + ": 1 files, 1 domains, 2 limits: OK\n  api.account: 2 limits, each must allow: api.account#0, api.account#daily\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}
