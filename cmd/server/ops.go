package main

import (
	"io"

	"github.com/fastlimit/fastlimit/internal/opsctl"
)

// command runs a subcommand of the binary and returns its exit code.
type command func(args []string, getenv func(string) string, stdout, stderr io.Writer) int

// commands are the binary's subcommands: check, and the operators' ones
// of package opsctl, clients of running servers' admin listeners.
func commands() map[string]command {
	m := map[string]command{"check": runCheck}
	for name, c := range opsctl.Commands {
		m[name] = c
	}
	return m
}
