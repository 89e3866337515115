package logging_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fastlimit/fastlimit/internal/observe/logging"
)

// clock is a zapcore.Clock stopped at one instant.
type clock struct{ t time.Time }

func (c clock) Now() time.Time                         { return c.t }
func (c clock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// at is the instant of the reference's lines quoted below.
var at = time.Date(2026, 12, 1, 8, 44, 10, 344824444, time.UTC)

func newLogger(t *testing.T, f logging.Format, level zapcore.Level) (*zap.Logger, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	log, err := logging.New(&buf, level, f, zap.WithClock(clock{at}))
	if err != nil {
		t.Fatal(err)
	}
	return log, &buf
}

func lines(buf *bytes.Buffer) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func decodeJSON(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("line %q is not a JSON object: %v", line, err)
	}
	return m
}

// TestJSONMatchesReference writes the line the reference (logrus'
// JSONFormatter with its FieldMap) wrote at startup, and wants the same
// keys and values.
func TestJSONMatchesReference(t *testing.T) {
	// Written by envoyproxy/ratelimit at the pinned version, LOG_FORMAT=json.
	const reference = `{"@message":"connecting to redis on 127.0.0.1:40829 with pool size 10","@timestamp":"2026-12-01T08:44:10.344824444Z","level":"warning"}`
	log, buf := newLogger(t, logging.JSON, zapcore.DebugLevel)
	log.Warn("connecting to redis on 127.0.0.1:40829 with pool size 10")
	got := lines(buf)
	if len(got) != 1 {
		t.Fatalf("lines %q", got)
	}
	if g, w := decodeJSON(t, got[0]), decodeJSON(t, reference); !reflect.DeepEqual(g, w) {
		t.Errorf("line\n got %v\nwant %v", g, w)
	}
}

// TestJSONLevelsAndKeys writes every level and checks the reference's keys
// and level words, with FastLimit's fields kept as extra fields.
func TestJSONLevelsAndKeys(t *testing.T) {
	cases := []struct {
		write func(*zap.Logger)
		word  string
	}{
		{func(l *zap.Logger) { l.Debug("m", zap.String("domain", "edge")) }, "debug"},
		{func(l *zap.Logger) { l.Info("m", zap.String("domain", "edge")) }, "info"},
		{func(l *zap.Logger) { l.Warn("m", zap.String("domain", "edge")) }, "warning"},
		{func(l *zap.Logger) { l.Error("m", zap.String("domain", "edge")) }, "error"},
		{func(l *zap.Logger) { l.DPanic("m", zap.String("domain", "edge")) }, "error"},
	}
	for _, tc := range cases {
		t.Run(tc.word, func(t *testing.T) {
			log, buf := newLogger(t, logging.JSON, zapcore.DebugLevel)
			tc.write(log.Named("rls"))
			got := lines(buf)
			if len(got) != 1 {
				t.Fatalf("lines %q", got)
			}
			m := decodeJSON(t, got[0])
			want := map[string]any{"@timestamp": "2026-12-01T08:44:10.344824444Z", "@message": "m",
				"level": tc.word, "logger": "rls", "domain": "edge"}
			if !reflect.DeepEqual(m, want) {
				t.Errorf("line %v, want %v", m, want)
			}
			ts, err := time.Parse(time.RFC3339Nano, m["@timestamp"].(string))
			if err != nil || !ts.Equal(at) {
				t.Errorf("@timestamp %v: %v", m["@timestamp"], err)
			}
		})
	}
}

// TestJSONFieldsClash gives fields the line's own keys, directly and
// through With: they are renamed fields.<key>, as logrus renames them;
// nested keys stay.
func TestJSONFieldsClash(t *testing.T) {
	log, buf := newLogger(t, logging.JSON, zapcore.InfoLevel)
	log.With(zap.String("level", "from-with")).Info("m",
		zap.String("@message", "a field"), zap.Int("@timestamp", 7), zap.String("ts", "kept"),
		zap.Namespace("request"), zap.String("level", "nested"))
	got := lines(buf)
	if len(got) != 1 {
		t.Fatalf("lines %q", got)
	}
	m := decodeJSON(t, got[0])
	want := map[string]any{
		"@timestamp": "2026-12-01T08:44:10.344824444Z", "@message": "m", "level": "info",
		"fields.level": "from-with", "fields.@message": "a field", "fields.@timestamp": json.Number("7"),
		"ts": "kept", "request": map[string]any{"level": "nested"},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("line\n got %v\nwant %v", m, want)
	}
	if strings.Count(got[0], `"level"`) != 2 { // the line's and the nested one
		t.Errorf("line %s", got[0])
	}
}

// TestLevelFilter drops lines below the level.
func TestLevelFilter(t *testing.T) {
	for _, f := range []logging.Format{logging.JSON, logging.Text, logging.Console} {
		log, buf := newLogger(t, f, zapcore.WarnLevel)
		log.Debug("d")
		log.Info("i")
		log.Warn("w")
		log.Error("e")
		if got := lines(buf); len(got) != 2 || !strings.Contains(got[0], "w") || !strings.Contains(got[1], "e") {
			t.Errorf("%s: lines %q", f, got)
		}
	}
}

// TestConsole keeps zap's console line with the level in colour.
func TestConsole(t *testing.T) {
	log, buf := newLogger(t, logging.Console, zapcore.InfoLevel)
	log.Warn("careful", zap.String("domain", "edge"))
	got := lines(buf)
	if len(got) != 1 {
		t.Fatalf("lines %q", got)
	}
	parts := strings.Split(got[0], "\t")
	if len(parts) != 4 || parts[0] != "2026-12-01T08:44:10.344Z" || parts[1] != "\x1b[33mWARN\x1b[0m" ||
		parts[2] != "careful" || parts[3] != `{"domain": "edge"}` {
		t.Errorf("console line %q", got[0])
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]logging.Format{"json": logging.JSON, " JSON ": logging.JSON, "Text": logging.Text, "console": logging.Console} {
		if got, err := logging.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "logfmt", "jsonl"} {
		if _, err := logging.ParseFormat(in); err == nil {
			t.Errorf("ParseFormat(%q): no error", in)
		}
	}
	if _, err := logging.New(&bytes.Buffer{}, zapcore.InfoLevel, logging.Format("xml")); err == nil {
		t.Error("New with format xml: no error")
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]zapcore.Level{
		"trace": zapcore.DebugLevel, "DEBUG": zapcore.DebugLevel, "info": zapcore.InfoLevel,
		"WARN": zapcore.WarnLevel, "warning": zapcore.WarnLevel, "Error": zapcore.ErrorLevel,
		"panic": zapcore.PanicLevel, "fatal": zapcore.FatalLevel,
	} {
		if got, err := logging.ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "verbose", "warnings"} {
		if _, err := logging.ParseLevel(in); err == nil {
			t.Errorf("ParseLevel(%q): no error", in)
		}
	}
}

func TestLevelWord(t *testing.T) {
	for l, want := range map[zapcore.Level]string{
		zapcore.DebugLevel: "debug", zapcore.InfoLevel: "info", zapcore.WarnLevel: "warning",
		zapcore.ErrorLevel: "error", zapcore.DPanicLevel: "error", zapcore.PanicLevel: "panic", zapcore.FatalLevel: "fatal",
	} {
		if got := logging.LevelWord(l); got != want {
			t.Errorf("LevelWord(%v) = %q, want %q", l, got, want)
		}
	}
}

// failing is a WriteSyncer that fails every write.
type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }
func (failing) Sync() error               { return nil }

func TestWriteErrorReturned(t *testing.T) {
	core, err := logging.NewCore(failing{}, zapcore.InfoLevel, logging.Text)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Write(zapcore.Entry{Level: zapcore.InfoLevel, Message: "m"}, nil); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Write: %v", err)
	}
}
