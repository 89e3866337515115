package main

import (
	"io"

	"github.com/fastlimit/fastlimit/internal/opsctl"
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
	}
	for name, c := range opsctl.Commands {
		m[name] = c
	}
	return m
}
