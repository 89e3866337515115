// Command server is FastLimit: an Envoy-compatible external rate-limit
// server. It answers envoy.service.ratelimit.v3.RateLimitService over gRPC
// from YAML rules, on Redis or an embedded in-memory store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Version is stamped at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check" {
		return runCheck(args[1:], getenv, stdout, stderr)
	}
	var o options
	fs := newFlagSet("fastlimit", &o, stderr)
	if err := readOptions(&o, fs, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, err)
		return 2
	}
	o.refStats.getenv = getenv
	log, err := newLogger(o.logLevel, o.logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, o.named(err))
		return 2
	}
	defer func() { _ = log.Sync() }()
	if len(o.refWarnings) > 0 {
		log.Warn(refWarningMsg, zap.Strings("settings", o.refWarnings))
	}
	if given := o.src["redis-conns"]; given != "" {
		log.Warn(given + " is no longer used: every Redis is reached through go-redis' pool, requests merged into script calls (--redis-batches)")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := newServer(o, log, prometheus.NewRegistry())
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	if err := srv.Open(ctx); err != nil {
		log.Error("cannot start", zap.Error(err))
		_ = srv.Close(context.Background())
		return 1
	}
	<-ctx.Done()
	stop() // a second signal now ends the process at once
	log.Info("stopping")
	if err := srv.Close(context.Background()); err != nil {
		log.Error("unclean stop", zap.Error(err))
		return 1
	}
	return 0
}

// newLogger builds the process's logger. level and format are checked
// already (parseLogLevel, parseLogFormat); a bad one is a settingError.
func newLogger(level, format string, out io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, badSetting("log-level", "%w", err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case logJSON:
		enc = zapcore.NewJSONEncoder(ec)
	case logText:
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	case logConsole:
		ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, badSetting("log-format", "%q is not json, text or console", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(out), lvl)), nil
}
