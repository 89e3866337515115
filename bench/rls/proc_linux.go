package main

import "syscall"

// sysProcAttr makes a child die with bench/rls (SIGKILL), even when
// bench/rls is killed without a chance to stop it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
