package logging

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap/zapcore"
)

// textCore writes the reference's text lines, as logrus' TextFormatter
// writes them when the output is not a terminal:
//
//	time="2026-12-01T08:45:19Z" level=warning msg="Listening for gRPC on '127.0.0.1:8081'" domain=edge logger=rls
//
// Fields follow sorted by key; a value is quoted unless it is made only of
// letters, digits and -._/@^+.
type textCore struct {
	zapcore.LevelEnabler
	out     zapcore.WriteSyncer
	context []zapcore.Field // fields of With, oldest first
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (c *textCore) With(fields []zapcore.Field) zapcore.Core {
	return &textCore{LevelEnabler: c.LevelEnabler, out: c.out, context: append(slices.Clip(c.context), fields...)}
}

func (c *textCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c *textCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	b := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(b)
	b.Reset()
	appendText(b, ent, c.context, fields)
	if _, err := c.out.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write log line: %w", err)
	}
	if ent.Level > zapcore.ErrorLevel {
		// Panic and fatal lines must be out before the process goes.
		return c.Sync()
	}
	return nil
}

func (c *textCore) Sync() error { return c.out.Sync() }

// appendText appends one line for ent with the context and entry fields.
func appendText(b *bytes.Buffer, ent zapcore.Entry, context, fields []zapcore.Field) {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range context {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	data := enc.Fields
	if ent.LoggerName != "" {
		data[loggerKey] = ent.LoggerName
	}
	if ent.Stack != "" {
		data[stackKey] = ent.Stack
	}
	for _, k := range []string{textTimeKey, levelKey, textMessageKey} {
		if v, ok := data[k]; ok {
			data[clashPrefix+k] = v
			delete(data, k)
		}
	}

	appendPair(b, textTimeKey, ent.Time.Format(time.RFC3339))
	appendPair(b, levelKey, LevelWord(ent.Level))
	if ent.Message != "" {
		appendPair(b, textMessageKey, ent.Message)
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		appendPair(b, k, data[k])
	}
	b.WriteByte('\n')
}

func appendPair(b *bytes.Buffer, key string, value any) {
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(key)
	b.WriteByte('=')
	s, ok := value.(string)
	if !ok {
		s = fmt.Sprint(value)
	}
	if needsQuoting(s) {
		b.WriteString(strconv.Quote(s))
	} else {
		b.WriteString(s)
	}
}

// needsQuoting reports whether s holds anything but letters, digits and
// -._/@^+ (an empty value is bare, as in logrus).
func needsQuoting(s string) bool {
	for _, ch := range s {
		if !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
			ch == '-' || ch == '.' || ch == '_' || ch == '/' || ch == '@' || ch == '^' || ch == '+') {
			return true
		}
	}
	return false
}
