package main

import (
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "abc123"}
	clean, modified := debug.BuildSetting{Key: "vcs.modified", Value: "false"}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}
	for _, tc := range []struct {
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"v1.2.0", &debug.BuildInfo{Main: debug.Module{Version: "v0.9.0"}}, "v1.2.0"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}}, "v1.3.0"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{rev, clean}}, "abc123"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{rev, modified}}, "abc123-dirty"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"dev", nil, "dev"},
	} {
		if got := versionOf(tc.stamped, tc.bi); got != tc.want {
			t.Errorf("versionOf(%q, %+v) = %q, want %q", tc.stamped, tc.bi, got, tc.want)
		}
	}
}

// TestVersionCommand: "version", and --version anywhere among the flags,
// print the version, the stamped one when there is one, whatever the
// environment holds.
func TestVersionCommand(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v9.8.7"
	want := "fastlimit v9.8.7 (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	env := map[string]string{"LOG_LEVEL": "verbose", "VERSION": "1.2.3"} // a bad setting, and a variable of another program
	for _, args := range [][]string{
		{"version"}, {"--version"}, {"-version"}, {"--version=true"},
		{"--log-level", "info", "--version"}, {"--version", "--log-level", "info"},
		{"--redis-url", "redis://r:6379", "-version", "--http-addr", ":1"},
	} {
		var out, stderr strings.Builder
		if code := run(args, func(k string) string { return env[k] }, &out, &stderr); code != 0 || out.String() != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0, %q", args, code, out.String(), stderr.String(), want)
		}
	}
	// --version=false serves; here the bad LOG_LEVEL stops it.
	var stderr strings.Builder
	if code := run([]string{"--version=false"}, func(k string) string { return env[k] }, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "LOG_LEVEL") {
		t.Errorf("--version=false: exit %d, stderr %q; want the settings read", code, stderr.String())
	}
}

// TestHelpListsCommands: -h names every subcommand, and --version.
func TestHelpListsCommands(t *testing.T) {
	var stderr strings.Builder
	if code := run([]string{"-h"}, func(string) string { return "" }, io.Discard, &stderr); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	help := stderr.String()
	for name := range commands() {
		if !strings.Contains(help, "\n  "+name+" ") {
			t.Errorf("-h does not list the command %s:\n%s", name, help)
		}
	}
	for _, want := range []string{"Usage:\n  fastlimit [flags]", "fastlimit COMMAND -h", "  -version\n", "  -redis-url string\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("-h lacks %q", want)
		}
	}
}
