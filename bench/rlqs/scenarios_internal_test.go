package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/child"
)

// TestMain runs the isolation scenario's report streams when the test
// binary is started as their child (startReporters).
func TestMain(m *testing.M) {
	if os.Getenv(reportersEnv) == "1" && len(os.Args) > 1 && os.Args[1] == reportersCommand {
		os.Exit(runReporters(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestIsolationSmoke runs the isolation scenario with tiny numbers: it
// checks that it runs and prints a row per phase, not its figures.
func TestIsolationSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the server")
	}
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("FASTLIMIT_REQUIRE_REDIS") == "" {
		t.Skip("no redis-server")
	}
	var out bytes.Buffer
	var log child.Output // the children write it at once
	code := run([]string{"--scenario", "isolation", "--duration", "1s", "--streams", "20", "--conns", "2",
		"--rls-rate", "50", "--rounds", "1"}, &out, &log)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), log.String())
	}
	for _, row := range []string{"| 1 | 0 | none | ", "| 1 | 20 | no bound | ", "| 1 | 20 | one per CPU | "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q in\n%s", row, out.String())
		}
	}
}
