package main

import (
	"fmt"
	"io"

	"github.com/fastlimit/fastlimit/internal/opsctl"
	"github.com/fastlimit/fastlimit/internal/server"
	"github.com/fastlimit/fastlimit/internal/settings"
)

// command runs a subcommand of the binary and returns its exit code.
type command func(args []string, getenv func(string) string, stdout, stderr io.Writer) int

// commands are the binary's subcommands: check, version, and the
// operators' ones of package opsctl, clients of running servers' admin
// listeners. The server's -h lists them (package settings).
func commands() map[string]command {
	m := map[string]command{
		"check":   runCheck,
		"version": func(_ []string, _ func(string) string, stdout, _ io.Writer) int { return runVersion(stdout) },
		// --rlqs-process's child
		server.RLQSChildCommand: runRLQSChild,
	}
	for name, c := range opsctl.Commands {
		m[name] = c
	}
	return m
}

// runHelp is "fastlimit help [COMMAND]": the server's usage (its
// commands and flags), or a command's, on stdout; an unknown command is
// a usage error.
func runHelp(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		_, _ = settings.Parse("fastlimit", []string{"-h"}, getenv, stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintln(stderr, "usage: fastlimit help [COMMAND]")
		return 2
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "fastlimit help: no command %q; fastlimit help lists them\n", settings.MaskCredentials(args[0]))
		return 2
	}
	return cmd([]string{"-h"}, getenv, stderr, stdout) // a command writes its usage to its stderr
}
