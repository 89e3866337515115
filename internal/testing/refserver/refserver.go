// Package refserver runs envoyproxy/ratelimit, the reference server, for
// differential tests, and holds what its main branch answers where the
// pinned binary cannot (MetadataCases).
package refserver

import (
	"os"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

const (
	// EnvBin names the variable that holds the reference binary's path;
	// scripts/test.sh installs the binary and sets it.
	EnvBin = "FASTLIMIT_REFERENCE_BIN"
	// Version is the pinned reference: go install
	// github.com/envoyproxy/ratelimit/src/service_cmd@Version.
	Version = "v1.4.1-0.20260122083618-3fb702589d36"
)

// Bin returns the reference binary named by EnvBin. Without it t is
// skipped, or fails with FASTLIMIT_REQUIRE_REDIS=1 (as CI runs).
func Bin(t testing.TB) string {
	t.Helper()
	path := os.Getenv(EnvBin)
	if path == "" {
		if os.Getenv(redistest.EnvRequire) == "1" {
			t.Fatalf("%s is not set and %s=1: run scripts/test.sh, which installs envoyproxy/ratelimit %s", EnvBin, redistest.EnvRequire, Version)
		}
		t.Skipf("%s is not set: scripts/test.sh installs envoyproxy/ratelimit %s", EnvBin, Version)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v", EnvBin, err)
	}
	return path
}
