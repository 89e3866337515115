package main

import "syscall"

// sysProcAttr makes a child die with cmd/bench (SIGKILL), even when
// cmd/bench is killed without a chance to stop it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
