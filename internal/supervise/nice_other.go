//go:build !linux

package supervise

import "errors"

// Renice is Linux's only.
func Renice(n int) error { return errors.New("renice: only on Linux") }
