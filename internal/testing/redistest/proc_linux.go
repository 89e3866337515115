package redistest

import "syscall"

// sysProcAttr kills the server when the test binary dies, even if Main
// never runs (a panic, a timeout, a test binary without TestMain).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
