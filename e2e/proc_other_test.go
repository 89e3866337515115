//go:build !linux

package e2e_test

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
