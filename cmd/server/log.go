package main

import (
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fastlimit/fastlimit/pkg/settings"
)

// newLogger builds the process's logger. level and format are checked
// already by the settings; a bad one is a *settings.Error.
func newLogger(level, format string, out io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, settings.Bad("log-level", "%w", err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case settings.LogJSON:
		enc = zapcore.NewJSONEncoder(ec)
	case settings.LogText:
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	case settings.LogConsole:
		ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, settings.Bad("log-format", "%q is not json, text or console", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(out), lvl)), nil
}
