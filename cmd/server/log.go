package main

import (
	"io"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/observe/logging"
	"github.com/fastlimit/fastlimit/internal/settings"
)

// newLogger builds the process's logger (package logging): json and text
// write envoyproxy/ratelimit's lines, console zap's. level and format are
// checked already by the settings; a bad one is a *settings.Error.
func newLogger(level, format string, out io.Writer) (*zap.Logger, error) {
	lvl, err := logging.ParseLevel(level)
	if err != nil {
		return nil, settings.Bad("log-level", "%w", err)
	}
	f, err := logging.ParseFormat(format)
	if err != nil {
		return nil, settings.Bad("log-format", "%w", err)
	}
	return logging.New(out, lvl, f)
}
