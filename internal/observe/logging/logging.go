// Package logging builds the process's zap logger in the line formats of
// --log-format (LOG_FORMAT): envoyproxy/ratelimit's JSON and text lines, or
// zap's coloured console lines. A field whose key is one of a line's own
// keys is renamed "fields.<key>", as logrus renames it
// (docs/design.md#log-lines).
package logging

import (
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Format is a log line format.
type Format string

// Formats of --log-format.
const (
	JSON    Format = "json"    // the reference's JSON line: @timestamp, @message, level
	Text    Format = "text"    // the reference's text line: time, level, msg, then fields
	Console Format = "console" // zap's console line, the level in colour
)

// Keys of the reference's lines.
const (
	jsonTimeKey    = "@timestamp"
	jsonMessageKey = "@message"
	levelKey       = "level"
	textTimeKey    = "time"
	textMessageKey = "msg"
	loggerKey      = "logger"
	stackKey       = "stacktrace"
	clashPrefix    = "fields."
)

// ParseFormat parses a --log-format value in any case.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case JSON, Text, Console:
		return f, nil
	}
	return "", fmt.Errorf("%q is not json, text or console", s)
}

// ParseLevel parses a log level in any case, with the reference's (logrus')
// names too: "trace" is debug, "warning" is warn.
func ParseLevel(s string) (zapcore.Level, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	switch l {
	case "trace":
		l = "debug"
	case "warning":
		l = "warn"
	}
	lvl, err := zapcore.ParseLevel(l)
	if err != nil || l == "" {
		return 0, fmt.Errorf("%q is not trace, debug, info, warn (or warning), error, panic or fatal", s)
	}
	return lvl, nil
}

// LevelWord returns logrus' word for a level ("warning" for warn; zap's
// DPanic is an "error").
func LevelWord(l zapcore.Level) string {
	switch l {
	case zapcore.DebugLevel:
		return "debug"
	case zapcore.InfoLevel:
		return "info"
	case zapcore.WarnLevel:
		return "warning"
	case zapcore.ErrorLevel, zapcore.DPanicLevel:
		return "error"
	case zapcore.PanicLevel:
		return "panic"
	case zapcore.FatalLevel:
		return "fatal"
	}
	return l.String()
}

// New returns a logger that writes lines of format f at level and above
// to out. opts are passed to zap.New (zap.WithClock in tests).
func New(out io.Writer, level zapcore.LevelEnabler, f Format, opts ...zap.Option) (*zap.Logger, error) {
	core, err := NewCore(zapcore.AddSync(out), level, f)
	if err != nil {
		return nil, err
	}
	return zap.New(core, opts...), nil
}

// NewCore returns the zapcore.Core of New. The caller serialises writes to
// out (zapcore.Lock, when several cores share it).
func NewCore(out zapcore.WriteSyncer, level zapcore.LevelEnabler, f Format) (zapcore.Core, error) {
	switch f {
	case JSON:
		ec := zapcore.EncoderConfig{
			TimeKey:        jsonTimeKey,
			LevelKey:       levelKey,
			NameKey:        loggerKey,
			MessageKey:     jsonMessageKey,
			StacktraceKey:  stackKey,
			LineEnding:     zapcore.DefaultLineEnding,
			EncodeLevel:    func(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) { enc.AppendString(LevelWord(l)) },
			EncodeTime:     zapcore.TimeEncoderOfLayout(time.RFC3339Nano),
			EncodeDuration: zapcore.StringDurationEncoder,
			EncodeName:     zapcore.FullNameEncoder,
		}
		core := zapcore.NewCore(zapcore.NewJSONEncoder(ec), out, level)
		return &renaming{Core: core, reserved: []string{jsonTimeKey, jsonMessageKey, levelKey}}, nil
	case Text:
		return &textCore{LevelEnabler: level, out: out}, nil
	case Console:
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		return zapcore.NewCore(zapcore.NewConsoleEncoder(ec), out, level), nil
	}
	return nil, fmt.Errorf("log format %q is not json, text or console", f)
}

// renaming is a Core that renames the top-level fields whose keys are the
// line's own; fields after a zap.Namespace are nested and keep theirs.
type renaming struct {
	zapcore.Core
	reserved []string
	nested   bool // a namespace is open: later fields are nested
}

func (r *renaming) With(fields []zapcore.Field) zapcore.Core {
	fields, nested := r.rename(fields)
	return &renaming{Core: r.Core.With(fields), reserved: r.reserved, nested: nested}
}

func (r *renaming) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if r.Enabled(ent.Level) {
		return ce.AddCore(ent, r)
	}
	return ce
}

func (r *renaming) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	fields, _ = r.rename(fields)
	return r.Core.Write(ent, fields)
}

// rename renames the reserved keys (in a copy), and reports an open namespace.
func (r *renaming) rename(fields []zapcore.Field) ([]zapcore.Field, bool) {
	nested := r.nested
	copied := false
	for i, f := range fields {
		if nested {
			break
		}
		if f.Type == zapcore.NamespaceType {
			nested = true
		}
		if !isReserved(f.Key, r.reserved) {
			continue
		}
		if !copied {
			fields = append([]zapcore.Field(nil), fields...)
			copied = true
		}
		fields[i].Key = clashPrefix + f.Key
	}
	return fields, nested
}

func isReserved(key string, reserved []string) bool {
	for _, k := range reserved {
		if k == key {
			return true
		}
	}
	return false
}
