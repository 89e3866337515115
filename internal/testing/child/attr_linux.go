package child

import "syscall"

// Attr kills a child when the test binary dies, however it dies (a panic,
// a timeout, a test binary without TestMain).
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
