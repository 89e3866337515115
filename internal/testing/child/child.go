// Package child starts the processes of tests, their harnesses and the
// benchmarks: a child dies with the process that started it (on Linux),
// its output is kept for failure messages, and it is stopped gently or
// killed.
package child

import (
	"bytes"
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

// Env is the environment of a child that must not inherit its parent's:
// PATH, HOME, TMPDIR and the Go runtime's tuning variables where set, then
// extra ("NAME=value"). FastLimit reads a variable for every flag and the
// reference reads REDIS_URL and friends, so the caller's own settings
// must not leak into either.
func Env(extra ...string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// Process is a child started by Start or StartLogged. Its methods are
// safe for concurrent use.
type Process struct {
	Name   string    // for messages: "redis-server for FastLimit"
	Cmd    *exec.Cmd // Cmd.Process is set once started
	exited chan struct{}
	err    error   // Cmd.Wait's, once exited is closed
	out    *Output // its output, when kept in memory
	log    string  // its log file, when kept in one
}

// Start starts cmd, called name in messages, with Attr. When cmd has no
// stdout and stderr of its own, they are kept in memory for Output and
// Tail. The parent-death signal follows the thread that started the
// process, so cmd is started from a goroutine locked to its thread that
// waits for the process.
func Start(name string, cmd *exec.Cmd) (*Process, error) {
	p := &Process{Name: name, Cmd: cmd, exited: make(chan struct{})}
	if cmd.Stdout == nil && cmd.Stderr == nil {
		p.out = &Output{}
		cmd.Stdout, cmd.Stderr = p.out, p.out
	}
	if err := p.start(nil); err != nil {
		return nil, err
	}
	return p, nil
}

// StartLogged is Start with the child's stdout and stderr in the file
// log, created (or truncated) for it.
func StartLogged(name string, cmd *exec.Cmd, log string) (*Process, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, exited: make(chan struct{}), log: log}
	cmd.Stdout, cmd.Stderr = f, f
	if err := p.start(f); err != nil {
		return nil, err
	}
	return p, nil
}

// start runs the process from a thread of its own, which waits for it and
// then closes f (if any) and p.exited.
func (p *Process) start(f *os.File) error {
	p.Cmd.SysProcAttr = Attr()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := p.Cmd.Start()
		started <- err
		if err == nil {
			p.err = p.Cmd.Wait()
		}
		if f != nil {
			_ = f.Close()
		}
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start %s (%s): %w", p.Name, p.Cmd.Path, err)
	}
	return nil
}

// Exited is closed once the process has ended and been waited for.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Wait waits for the process to end and returns how it ended, as
// exec.Cmd.Wait does (an *exec.ExitError for a non-zero status or a
// signal).
func (p *Process) Wait() error {
	<-p.exited
	return p.err
}

// Alive reports whether the process still runs.
func (p *Process) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Pid is the process' id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process: SIGSTOP freezes it, SIGCONT thaws it.
func (p *Process) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
// It is idempotent.
func (p *Process) Kill() {
	if p.Alive() {
		_ = p.Cmd.Process.Kill()
	}
	<-p.exited
}

// Stop ends the process with SIGTERM, or SIGKILL if it still runs after
// grace, and waits for it. It is idempotent.
func (p *Process) Stop(grace time.Duration) {
	if !p.Alive() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.Kill()
	}
}

// Output returns what the process has written so far, or "" when its
// output goes to a writer of the caller's.
func (p *Process) Output() string {
	if p.log != "" {
		b, err := os.ReadFile(p.log)
		if err != nil {
			return fmt.Sprintf("(no log: %v)", err)
		}
		return string(b)
	}
	if p.out != nil {
		return p.out.String()
	}
	return ""
}

// Tail returns the last n lines of Output.
func (p *Process) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Failure wraps err with the process' name, id and state, and the end of
// its output.
func (p *Process) Failure(err error) error {
	state := "running"
	if !p.Alive() {
		state = "exited: " + p.Cmd.ProcessState.String()
	}
	where := ""
	if p.log != "" {
		where = " of " + p.log
	}
	return fmt.Errorf("%s (pid %d, %s): %w; last lines%s:\n%s", p.Name, p.Pid(), state, err, where, p.Tail(20))
}

// Group starts the processes of a run, each with its log file in Dir, and
// stops them: one by one as the run moves on, and every one left at the
// end. Its methods are safe for concurrent use.
type Group struct {
	Dir   string        // the log files go here
	Grace time.Duration // how long a process may take to exit after SIGTERM (default 5 s)

	mu   sync.Mutex
	list []*Process
	n    int // processes started, for unique log names
}

// Start starts path with args and exactly env as its environment, its
// output in a log file named after its number and name.
func (g *Group) Start(name, path string, args, env []string) (*Process, error) {
	g.mu.Lock()
	g.n++
	n := g.n
	g.mu.Unlock()
	base := strings.NewReplacer(" ", "-", "/", "-", "(", "", ")", "").Replace(name)
	cmd := exec.Command(path, args...)
	cmd.Env = env
	p, err := StartLogged(name, cmd, filepath.Join(g.Dir, fmt.Sprintf("%02d-%s.log", n, base)))
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.list = append(g.list, p)
	g.mu.Unlock()
	return p, nil
}

// Stop stops p (SIGTERM, then SIGKILL after Grace) and forgets it.
func (g *Group) Stop(p *Process) {
	p.Stop(g.grace())
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.list {
		if q == p {
			g.list = append(g.list[:i], g.list[i+1:]...)
			break
		}
	}
}

// StopAll stops every process still running, all at once.
func (g *Group) StopAll() {
	g.mu.Lock()
	list := g.list
	g.list = nil
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Go(func() { p.Stop(g.grace()) })
	}
	wg.Wait()
}

func (g *Group) grace() time.Duration {
	if g.Grace <= 0 {
		return 5 * time.Second
	}
	return g.Grace
}
