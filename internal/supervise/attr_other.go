//go:build !linux

package supervise

import "syscall"

// procAttr is nil: only Linux ends a child with its parent.
func procAttr() *syscall.SysProcAttr { return nil }
