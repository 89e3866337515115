package supervise

import "syscall"

// procAttr ends the child with the parent, however the parent ends.
func procAttr() *syscall.SysProcAttr {
	// Its own process group keeps a terminal's ^C to the parent, which
	// stops the child in its turn.
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}
