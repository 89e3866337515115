package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Version is stamped at build time with -ldflags "-X main.Version=...".
var Version = "dev"

// version is Version as stamped (make build, the Dockerfile), or else the
// module's build info: its version when installed as a module
// (go install ...@v1.2.3), or the VCS revision, "-dirty" when modified.
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(Version, bi)
}

func versionOf(stamped string, bi *debug.BuildInfo) string {
	if stamped != "dev" || bi == nil {
		return stamped
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return stamped
	}
	return rev + dirty
}

// runVersion prints "fastlimit VERSION (GOVERSION OS/ARCH)".
func runVersion(stdout io.Writer) int {
	fmt.Fprintf(stdout, "fastlimit %s (%s %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
