//go:build !linux

package main

import "syscall"

// sysProcAttr: without a parent-death signal, children are stopped by
// bench/rls itself on exit and on Ctrl-C only.
func sysProcAttr() *syscall.SysProcAttr { return nil }
