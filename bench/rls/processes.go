package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process may take to exit after SIGTERM before
// it gets SIGKILL.
const stopGrace = 5 * time.Second

// procs starts the processes of a run and stops them: one by one as the
// run moves on, and every one left at the end, on error and on Ctrl-C. On
// Linux they also die with bench/rls (parent-death signal), so a kill -9
// of bench/rls leaves nothing behind.
type procs struct {
	dir string // logs go here, one file per process

	mu   sync.Mutex
	list []*proc
	n    int // processes started, for unique log names
}

// proc is one child process; its output goes to a log file.
type proc struct {
	name   string // for messages: "redis-server for FastLimit"
	cmd    *exec.Cmd
	log    string // path of the log file
	exited chan struct{}
}

// start starts path with args and exactly env as its environment, its
// output in a log file named after name.
func (ps *procs) start(name, path string, args, env []string) (*proc, error) {
	ps.mu.Lock()
	ps.n++
	n := ps.n
	ps.mu.Unlock()
	logPath := filepath.Join(ps.dir, fmt.Sprintf("%02d-%s.log", n, strings.NewReplacer(" ", "-", "/", "-").Replace(name)))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, log: logPath, exited: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = sysProcAttr()
	// The parent-death signal follows the thread that started the
	// process: that thread must live as long as the process.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := p.cmd.Start()
		started <- err
		if err == nil {
			_ = p.cmd.Wait()
		}
		_ = f.Close()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// stop stops p (SIGTERM, then SIGKILL after stopGrace) and forgets it.
func (ps *procs) stop(p *proc) {
	p.stop()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, q := range ps.list {
		if q == p {
			ps.list = append(ps.list[:i], ps.list[i+1:]...)
			break
		}
	}
}

// stopAll stops every process still running, all at once.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Go(p.stop)
	}
	wg.Wait()
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop ends the process and waits for it; it is idempotent.
func (p *proc) stop() {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail returns the last n lines of the process' log, for error messages.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// failure describes p's failure with the end of its log.
func (p *proc) failure(err error) error {
	state := "running"
	if !p.alive() {
		state = "exited: " + p.cmd.ProcessState.String()
	}
	return fmt.Errorf("%s (pid %d, %s): %w; last lines of %s:\n%s", p.name, p.pid(), state, err, p.log, p.tail(20))
}
