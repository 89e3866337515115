package load

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Linux's timerfd_create flags.
const (
	clockMonotonic = 1
	tfdNonblock    = syscall.O_NONBLOCK
	tfdCloexec     = syscall.O_CLOEXEC
)

// timerfd is a Linux timer file, read through Go's network poller: a
// goroutine waiting on it holds no thread, and wakes when the kernel's
// timer fires (tens of µs late), where Go's timers, when the process is
// otherwise idle, wake a millisecond late.
type timerfd struct {
	f  *os.File
	fd uintptr
}

// newSleeper returns a timerfd, or Go's timers when the kernel has none.
func newSleeper() sleeper {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if errno != 0 {
		return goSleeper{}
	}
	return &timerfd{f: os.NewFile(fd, "timerfd"), fd: fd}
}

func (t *timerfd) sleep(d time.Duration) {
	// struct itimerspec: it_interval, then it_value (relative).
	spec := [4]int64{0, 0, int64(d / time.Second), int64(d % time.Second)}
	if _, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, t.fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		time.Sleep(d)
		return
	}
	var expirations [8]byte
	if _, err := t.f.Read(expirations[:]); err != nil {
		time.Sleep(d)
	}
}

func (t *timerfd) close() { _ = t.f.Close() }
