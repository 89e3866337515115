package main

import (
	"bytes"
	"slices"
	"testing"
)

// TestTopFlag: --top=false turns the servers' top identifiers off.
func TestTopFlag(t *testing.T) {
	on, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	off, err := parseFlags([]string{"--top=false"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if want := append(on.serverFlags, "--top-keys", "0"); !slices.Equal(off.serverFlags, want) || slices.Contains(on.serverFlags, "--top-keys") {
		t.Errorf("server flags %q, and %q with --top=false", on.serverFlags, off.serverFlags)
	}
}
