// Command server is FastLimit: an Envoy-compatible external rate-limit
// server. It answers envoy.service.ratelimit.v3.RateLimitService over gRPC
// from YAML rules, on Redis or an embedded in-memory store.
//
// main only reads the settings, builds the logger and runs the server
// (package server); "check" validates a rules directory, "version" prints
// the version, and top, explain, reset, refund and usage ask running
// servers (package opsctl).
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
	_ "time/tzdata" // the zones of rules' calendar windows, where the system has none (a scratch image)

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/server"
	"github.com/fastlimit/fastlimit/internal/settings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if cmd, ok := commands()[args[0]]; ok {
			return cmd(args[1:], getenv, stdout, stderr)
		}
	}
	if len(args) > 0 && args[0] == "help" {
		return runHelp(args[1:], getenv, stdout, stderr)
	}
	s, err := settings.Parse("fastlimit", args, getenv, stderr)
	if err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, settings.ErrVersion):
			return runVersion(stdout)
		}
		fmt.Fprintln(stderr, err)
		return 2
	}
	log, err := newLogger(s.LogLevel, s.LogFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, s.Named(err))
		return 2
	}
	defer func() { _ = log.Sync() }()
	if w := s.Warnings(); len(w) > 0 {
		log.Warn(settings.RefWarningMsg, zap.Strings("settings", w))
	}
	for _, n := range s.Notes() {
		log.Info(n)
	}
	for _, d := range s.Deprecated() {
		log.Warn(d)
	}
	return serve(s, log)
}

// serve runs the server until SIGINT or SIGTERM; a second signal ends the
// process at once.
func serve(s *settings.Settings, log *zap.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(s, log, prometheus.NewRegistry(), version())
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
