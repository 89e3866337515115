// Package refserver runs envoyproxy/ratelimit, the reference server, for
// differential tests, and holds what its main branch answers where the
// pinned binary cannot (MetadataCases).
package refserver

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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

// Fixtures returns the directory of the reference's own config test
// fixtures (test/config at Version), from the Go module cache: go mod
// download fetches the module once, as scripts/test.sh's install does. A
// test reads them there; none is copied into this repository.
func Fixtures(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/envoyproxy/ratelimit@"+Version)
	cmd.Dir = t.TempDir() // outside this module: its go.mod and go.sum stay as they are
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err == nil && mod.Error != "" {
		err = errors.New(mod.Error)
	}
	if err != nil || mod.Dir == "" {
		if os.Getenv(redistest.EnvRequire) == "1" {
			t.Fatalf("the reference's module %s: %v", Version, err)
		}
		t.Skipf("the reference's module %s: %v", Version, err)
	}
	return filepath.Join(mod.Dir, "test", "config")
}
