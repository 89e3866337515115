//go:build !unix

package connlimit

import "errors"

// OpenFilesLimit fails where there is no RLIMIT_NOFILE: give Budget.Files.
func OpenFilesLimit() (int, error) {
	return 0, errors.New("read the open-files limit: not supported on this system")
}
