package e2e_test

import "syscall"

// sysProcAttr kills a child when the test binary dies, however it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
