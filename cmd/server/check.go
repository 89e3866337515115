package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// runCheck validates a rules directory, printing every error with file and
// line: "fastlimit check --config DIR" for CI pipelines that lint rules;
// with --rules-overlay, the overlay of rules over xDS instead.
// It reads only the rules settings (settings.ParseRules), so the server's
// environment, RUNTIME_ROOT and the rest, finds the same files.
func runCheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	layout, warnings, err := settings.ParseRules("fastlimit check", args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, err)
		return 2
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	if layout.Overlay != "" {
		return checkOverlay(layout.Overlay, stdout, stderr)
	}
	r, err := rules.LoadWith(layout.Dir, layout.Load)
	if err != nil {
		for _, e := range rules.Flatten(err) {
			fmt.Fprintln(stderr, e)
		}
		return 1
	}
	for _, w := range r.Warnings {
		fmt.Fprintln(stderr, "warning: "+w.Error())
	}
	fmt.Fprintf(stdout, "%s: %d files, %d domains, %d limits: OK\n",
		layout.Dir, len(r.Files), len(r.Set.Domains()), len(r.Set.Limits()))
	writeGroups(stdout, r.Set.Limits())
	return 0
}

// checkOverlay validates the overlay of rules over xDS (--rules-overlay)
// alone: the rules it extends come from the xDS server.
func checkOverlay(path string, stdout, stderr io.Writer) int {
	ov, err := rules.LoadOverlay(path)
	if err != nil {
		for _, e := range rules.Flatten(err) {
			fmt.Fprintln(stderr, e)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: rules overlay of %d domains: OK\n", path, ov.Domains())
	return 0
}

// writeGroups lists the rules with several limits (rate_limits), one line
// each: "  api.account: 2 limits, each must allow: api.account#0, api.account#daily".
func writeGroups(w io.Writer, limits []*descriptors.Limit) {
	for _, l := range limits {
		if l.Group == nil || l.Index != 0 {
			continue
		}
		labels := make([]string, len(l.Group))
		for i, m := range l.Group {
			labels[i] = m.Label()
		}
		fmt.Fprintf(w, "  %s: %d limits, each must allow: %s\n", l.Path, len(l.Group), strings.Join(labels, ", "))
	}
}
