// Package child starts the processes of tests and their harnesses: a
// child dies with the test binary (on Linux), and its output is kept for
// failure messages.
package child

import (
	"bytes"
	"os/exec"
	"runtime"
	"sync"
)

// Output collects a child's stdout and stderr. It is safe for concurrent
// use.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String returns what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Run starts cmd, with Attr, on a goroutine locked to its thread, which
// waits for the process and then closes exited: the parent-death signal
// follows the thread that started the process, so that thread must live
// as long as the process.
func Run(cmd *exec.Cmd, exited chan struct{}) error {
	cmd.SysProcAttr = Attr()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		close(exited)
	}()
	return <-started
}
