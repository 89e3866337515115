//go:build unix

package connlimit

import (
	"fmt"
	"math"
	"syscall"
)

// OpenFilesLimit returns the soft RLIMIT_NOFILE, capped at math.MaxInt32.
func OpenFilesLimit() (int, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("read the open-files limit: %w", err)
	}
	return int(min(uint64(r.Cur), math.MaxInt32)), nil
}
