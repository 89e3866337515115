// Package supervise runs one child process for as long as its parent
// serves: it starts the child with listeners the parent bound, starts it
// again when it exits on its own (after a growing pause), and stops it
// gently, then by force, when asked. FastLimit's --rlqs-process runs the
// Rate Limit Quota Service this way, in a process the kernel schedules
// after the one that answers RateLimitService.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/clock"
)

// Clock is the time the pauses between starts take.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Options describe the child and how it is kept running.
type Options struct {
	Path string   // the executable
	Args []string // its arguments, without the program name
	Env  []string // its environment (nil: the parent's)
	// Files are the child's descriptors 3, 4, ...: listeners the parent
	// bound, so that a restarted child serves the same addresses and
	// nothing else takes them meanwhile.
	Files []*os.File
	// Stdout and Stderr receive the child's output (nil: the parent's).
	Stdout, Stderr *os.File
	Log            *zap.Logger
	Clock          Clock
	// Pause is the first wait before starting an exited child again; it
	// doubles at each exit within MaxPause of the start, up to MaxPause.
	Pause, MaxPause time.Duration
}

// Supervisor keeps one child running until Stop.
type Supervisor struct {
	o        Options
	restarts atomic.Int64
	pid      atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	proc     *os.Process // the running child, nil between runs
	started  atomic.Bool // Start was called: run closes done
}

// New returns a supervisor that starts nothing until Start.
func New(o Options) *Supervisor {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Pause <= 0 {
		o.Pause = 100 * time.Millisecond
	}
	o.MaxPause = max(o.MaxPause, o.Pause)
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	return &Supervisor{o: o, stop: make(chan struct{}), done: make(chan struct{})}
}

// Start starts the child and returns once it runs, or the error that kept
// it from starting; from then on an exited child is started again until
// Stop.
func (s *Supervisor) Start() error {
	s.started.Store(true)
	started := make(chan error, 1)
	go s.run(started)
	err := <-started
	if err != nil {
		<-s.done
	}
	return err
}

// run starts the child on a thread of its own, kept for the child's life:
// on Linux the child receives SIGTERM when the thread that started it
// ends, so the thread must outlive the child (and it does not end while
// the process lives).
func (s *Supervisor) run(started chan<- error) {
	runtime.LockOSThread()
	defer close(s.done)
	pause := s.o.Pause
	first := true
	for {
		p, err := s.spawn()
		if first {
			started <- err
			if err != nil {
				return
			}
			first = false
		}
		if err == nil {
			at := s.o.Clock.Now()
			state, werr := p.Wait()
			s.setProc(nil)
			select {
			case <-s.stop:
				return
			default:
			}
			s.restarts.Add(1)
			if s.o.Clock.Now().Sub(at) > s.o.MaxPause {
				pause = s.o.Pause // it ran a while: a fresh failure
			}
			s.o.Log.Error("the child process exited; starting it again", zap.Stringer("state", exitState{state, werr}),
				zap.Duration("after", pause))
		} else {
			s.o.Log.Error("cannot start the child process; trying again", zap.Error(err), zap.Duration("after", pause))
		}
		select {
		case <-s.stop:
			return
		case <-s.o.Clock.After(pause):
		}
		pause = min(2*pause, s.o.MaxPause)
	}
}

// spawn starts the child once.
func (s *Supervisor) spawn() (*os.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
		return nil, errors.New("stopped")
	default:
	}
	cmd := exec.Command(s.o.Path, s.o.Args...)
	cmd.Env = s.o.Env
	cmd.ExtraFiles = s.o.Files
	cmd.Stdout, cmd.Stderr = orStd(s.o.Stdout, os.Stdout), orStd(s.o.Stderr, os.Stderr)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.o.Path, err)
	}
	s.proc = cmd.Process
	s.pid.Store(int64(cmd.Process.Pid))
	return cmd.Process, nil
}

func (s *Supervisor) setProc(p *os.Process) {
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
}

func orStd(f, std *os.File) *os.File {
	if f != nil {
		return f
	}
	return std
}

// Restarts counts the child's starts after the first.
func (s *Supervisor) Restarts() int64 { return s.restarts.Load() }

// PID is the child's process id: the running one's, or the last one's.
func (s *Supervisor) PID() int { return int(s.pid.Load()) }

// Stop sends the child SIGTERM, and SIGKILL if it has not exited within
// grace or by ctx's end; it returns once the child has exited and will
// not be started again. Before Start it only keeps Start from starting.
func (s *Supervisor) Stop(ctx context.Context, grace time.Duration) error {
	s.mu.Lock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	p := s.proc
	s.mu.Unlock()
	if !s.started.Load() {
		return nil // never started: nothing runs
	}
	if p == nil {
		<-s.done
		return nil
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal the child: %w", err)
	}
	select {
	case <-s.done:
		return nil
	case <-s.o.Clock.After(grace):
	case <-ctx.Done():
	}
	_ = p.Kill()
	<-s.done
	return fmt.Errorf("the child process did not stop within %v; killed", grace)
}

// exitState names how a child ended.
type exitState struct {
	state *os.ProcessState
	err   error
}

func (e exitState) String() string {
	if e.err != nil {
		return e.err.Error()
	}
	return e.state.String()
}
