package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	config "github.com/fastlimit/fastlimit/pkg/rules"
)

// runCheck validates a rules directory, printing every error with file and
// line: "fastlimit check --config DIR" for CI pipelines that lint rules.
func runCheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet("fastlimit check", &o, stderr)
	if err := readOptions(&o, fs, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, err)
		return 2
	}
	if len(o.refWarnings) > 0 {
		fmt.Fprintln(stderr, "warning: "+refWarningMsg+": "+strings.Join(o.refWarnings, "; "))
	}
	layout := o.rules()
	rules, err := config.LoadWith(layout.dir, layout.load)
	if err != nil {
		for _, e := range flatten(err) {
			fmt.Fprintln(stderr, e)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d files, %d domains, %d limits: OK\n",
		layout.dir, len(rules.Files), len(rules.Set.Domains()), len(rules.Set.Limits()))
	return 0
}

// flatten lists the leaves of a joined error.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
