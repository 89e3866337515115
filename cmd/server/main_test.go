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

// TestPositionalArgument: "fastlimit help" and other stray words are
// errors, not a start with every later flag ignored.
func TestPositionalArgument(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--log-level", "debug", "serve", "--http-addr", ":1"}} {
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
