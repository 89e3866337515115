package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/settings"
)

// TestPositionalArgument: stray words are errors, not a start with
// every later flag ignored.
func TestPositionalArgument(t *testing.T) {
	for _, args := range [][]string{{"serve"}, {"--log-level", "debug", "serve", "--http-addr", ":1"}} {
		var stderr strings.Builder
		if code := run(args, func(string) string { return "" }, io.Discard, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "unexpected argument") {
			t.Errorf("%v: stderr %q", args, stderr.String())
		}
	}
}

// TestLogFormats: text and json are the reference's lines (package
// logging); a level in any case, and trace, parse.
func TestLogFormats(t *testing.T) {
	var buf bytes.Buffer
	s, err := settings.Parse("test", []string{"--log-level", "TRACE", "--log-format", "text"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log, err := newLogger(s.LogLevel, s.LogFormat, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", zap.String("k", "v"))
	if out := buf.String(); !strings.HasPrefix(out, `time="`) || !strings.HasSuffix(out, `" level=debug msg=hello k=v`+"\n") {
		t.Errorf("text log %q", out)
	}
	buf.Reset()
	if log, err = newLogger("warn", "json", &buf); err != nil {
		t.Fatal(err)
	}
	log.Warn("careful", zap.String("k", "v"))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("json log %q: %v", buf.String(), err)
	}
	if line["@message"] != "careful" || line["level"] != "warning" || line["k"] != "v" || line["@timestamp"] == nil {
		t.Errorf("json log %v", line)
	}
	for _, bad := range []string{"verbose", "infos"} {
		if _, err := settings.Parse("test", []string{"--log-level", bad}, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("level %q accepted", bad)
		}
	}
}

// TestHelp: "fastlimit help" prints the usage, its commands and their
// exit codes, and exits 0; "help COMMAND" prints the command's flags; an
// unknown command is a usage error.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"help"}, 0, "Commands:\n  help "},
		{[]string{"help"}, 0, "2 on bad usage"},
		{[]string{"help"}, 0, "-admin-addr"},
		{[]string{"help", "top"}, 0, "usage: fastlimit top [--domain D]"},
		{[]string{"help", "reset"}, 0, "-token-file"},
		{[]string{"help", "nope"}, 2, ""},
		{[]string{"help", "top", "explain"}, 2, ""},
	} {
		var stdout, stderr strings.Builder
		code := run(tc.args, func(string) string { return "" }, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) {
			t.Errorf("%q: exit %d, want %d; stdout\n%s\nwant %q in it; stderr %s", tc.args, code, tc.code, stdout.String(), tc.out, stderr.String())
		}
	}
}

// TestRLQSChildByHand: rlqs-serve runs only as --rlqs-process's child;
// by hand, without those settings, it is a usage error.
func TestRLQSChildByHand(t *testing.T) {
	for _, args := range [][]string{{"rlqs-serve"}, {"rlqs-serve", "--rlqs"}} {
		var stderr strings.Builder
		if code := run(args, func(string) string { return "" }, io.Discard, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "--rlqs-process") {
			t.Errorf("%v: stderr %q", args, stderr.String())
		}
	}
}
