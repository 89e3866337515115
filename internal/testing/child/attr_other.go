//go:build !linux

package child

import "syscall"

// Attr is nil: only Linux kills a child with its parent.
func Attr() *syscall.SysProcAttr { return nil }
