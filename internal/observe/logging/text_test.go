package logging_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fastlimit/fastlimit/internal/observe/logging"
)

// TestTextMatchesReference writes lines the reference (logrus'
// TextFormatter, output not a terminal) wrote at startup, byte for byte.
func TestTextMatchesReference(t *testing.T) {
	cases := []struct {
		at    time.Time
		write func(*zap.Logger)
		want  string
	}{
		{time.Date(2026, 12, 1, 8, 45, 19, 123456789, time.UTC),
			func(l *zap.Logger) { l.Warn("Listening for gRPC on '127.0.0.1:53485'") },
			`time="2026-12-01T08:45:19Z" level=warning msg="Listening for gRPC on '127.0.0.1:53485'"`},
		{time.Date(2026, 12, 1, 8, 45, 19, 0, time.UTC),
			func(l *zap.Logger) { l.Info("Stats initialized for statsd") },
			`time="2026-12-01T08:45:19Z" level=info msg="Stats initialized for statsd"`},
		{time.Date(2026, 12, 1, 8, 46, 11, 0, time.UTC),
			func(l *zap.Logger) {
				l.Warn("runtime: error processing /tmp/dropin-ref/nonexistent/current: lstat /tmp/dropin-ref/nonexistent/current: no such file or directory")
			},
			`time="2026-12-01T08:46:11Z" level=warning msg="runtime: error processing /tmp/dropin-ref/nonexistent/current: lstat /tmp/dropin-ref/nonexistent/current: no such file or directory"`},
	}
	for _, tc := range cases {
		var buf bytes.Buffer
		log, err := logging.New(&buf, zapcore.DebugLevel, logging.Text, zap.WithClock(clock{tc.at}))
		if err != nil {
			t.Fatal(err)
		}
		tc.write(log)
		if got := strings.TrimSuffix(buf.String(), "\n"); got != tc.want {
			t.Errorf("line\n got %s\nwant %s", got, tc.want)
		}
	}
}

// TestTextFields checks the fixed keys first, then the fields sorted by
// key with logrus' quoting, the logger's name and clashing keys renamed.
func TestTextFields(t *testing.T) {
	log, buf := newLogger(t, logging.Text, zapcore.DebugLevel)
	log.Named("xds").With(zap.String("msg", "clash"), zap.Int("attempt", 3)).Error("NACK",
		zap.String("zone", "a b"), zap.String("plain", "v1.2-x_y/z@w^q+r"), zap.String("empty", ""),
		zap.Duration("took", 1500*time.Millisecond), zap.Bool("ok", false),
		zap.Error(errors.New(`unit '9' "bad"`)), zap.Strings("list", []string{"a", "b"}),
		zap.String("time", "t"), zap.String("level", "l"))
	want := `time="2026-12-01T08:44:10Z" level=error msg=NACK attempt=3 empty= error="unit '9' \"bad\"" ` +
		`fields.level=l fields.msg=clash fields.time=t list="[a b]" logger=xds ok=false plain=v1.2-x_y/z@w^q+r took=1.5s zone="a b"`
	if got := strings.TrimSuffix(buf.String(), "\n"); got != want {
		t.Errorf("line\n got %s\nwant %s", got, want)
	}
}

// TestTextEmptyMessage leaves msg out, as logrus does.
func TestTextEmptyMessage(t *testing.T) {
	log, buf := newLogger(t, logging.Text, zapcore.DebugLevel)
	log.Info("", zap.String("k", "v"))
	if got, want := buf.String(), "time=\"2026-12-01T08:44:10Z\" level=info k=v\n"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
}

// parseText splits a text line back into its keys and values (bare, or
// Go-quoted).
func parseText(line string) ([]string, map[string]string, error) {
	var keys []string
	vals := map[string]string{}
	for len(line) > 0 {
		eq := strings.IndexByte(line, '=')
		if eq <= 0 {
			return nil, nil, fmt.Errorf("no key=value at %q", line)
		}
		key := line[:eq]
		line = line[eq+1:]
		var val string
		if strings.HasPrefix(line, `"`) {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				return nil, nil, fmt.Errorf("value of %s: %w", key, err)
			}
			if val, err = strconv.Unquote(q); err != nil {
				return nil, nil, err
			}
			line = line[len(q):]
		} else {
			end := strings.IndexByte(line, ' ')
			if end < 0 {
				end = len(line)
			}
			val, line = line[:end], line[end:]
		}
		keys = append(keys, key)
		vals[key] = val
		if line != "" {
			if line[0] != ' ' {
				return nil, nil, fmt.Errorf("junk after %s: %q", key, line)
			}
			line = line[1:]
		}
	}
	return keys, vals, nil
}

// FuzzTextRoundTrip proves that any message and field value (any bytes,
// not only UTF-8) comes back unchanged when the line is split on its
// quoting, so that one line is always one record.
func FuzzTextRoundTrip(f *testing.F) {
	f.Add("hello", "world")
	f.Add("", "")
	f.Add("a\nb", "x=y z")
	f.Add(`"quoted"`, "\xff\xfe")
	f.Add("plain-value_1.2/x@y^z+", "tab\there")
	f.Fuzz(func(t *testing.T, msg, value string) {
		var buf bytes.Buffer
		log, err := logging.New(&buf, zapcore.InfoLevel, logging.Text, zap.WithClock(clock{at}))
		if err != nil {
			t.Fatal(err)
		}
		log.Info(msg, zap.String("value", value))
		out := buf.String()
		if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
			t.Fatalf("not one line: %q", out)
		}
		keys, vals, err := parseText(strings.TrimSuffix(out, "\n"))
		if err != nil {
			t.Fatalf("line %q: %v", out, err)
		}
		wantKeys := []string{"time", "level", "msg", "value"}
		if msg == "" {
			wantKeys = []string{"time", "level", "value"}
		}
		if !reflect.DeepEqual(keys, wantKeys) {
			t.Fatalf("keys %q, want %q (line %q)", keys, wantKeys, out)
		}
		// %q writes invalid UTF-8 as \x escapes, which unquote back to the
		// same bytes.
		if vals["msg"] != msg || vals["value"] != value {
			t.Fatalf("round trip: msg %q value %q from line %q", vals["msg"], vals["value"], out)
		}
		if !utf8.ValidString(out) {
			t.Fatalf("line is not UTF-8: %q", out)
		}
	})
}
