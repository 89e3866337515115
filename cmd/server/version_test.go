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

// TestVersionCommand: "version" and "--version" print the version, the
// stamped one when there is one.
func TestVersionCommand(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v9.8.7"
	for _, arg := range []string{"version", "--version", "-version"} {
		var out strings.Builder
		if code := run([]string{arg}, func(string) string { return "" }, &out, io.Discard); code != 0 {
			t.Errorf("%s: exit %d", arg, code)
		}
		if want := "fastlimit v9.8.7 (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"; out.String() != want {
			t.Errorf("%s: %q, want %q", arg, out.String(), want)
		}
	}
}
