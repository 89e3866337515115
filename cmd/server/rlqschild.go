package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/server"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/supervise"
)

// runRLQSChild is "fastlimit rlqs-serve [FLAGS]", the child that
// --rlqs-process starts with the server's own flags and environment: it
// lowers its CPU priority to --rlqs-nice and serves RLQS alone, on the
// listeners its parent passed it, until SIGTERM. It is not run by hand.
func runRLQSChild(args []string, getenv func(string) string, _, stderr io.Writer) int {
	s, err := settings.Parse("fastlimit "+server.RLQSChildCommand, args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, err)
		return 2
	}
	if !s.RLQS.Enabled || !s.RLQS.Process {
		fmt.Fprintf(stderr, "fastlimit %s: started by --rlqs-process, with --rlqs and --rlqs-addr; not run by hand\n", server.RLQSChildCommand)
		return 2
	}
	s.AsRLQSChild()
	log, err := newLogger(s.LogLevel, s.LogFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, s.Named(err))
		return 2
	}
	defer func() { _ = log.Sync() }()
	log = log.With(zap.String("process", "rlqs"))
	if err := supervise.Renice(s.RLQS.Nice); err != nil {
		log.Warn("cannot lower the rlqs process's priority; it competes with RateLimitService for CPU", zap.Error(err))
	}
	return serve(s, log)
}
