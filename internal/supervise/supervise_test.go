package supervise

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// deadline bounds every wait on a condition: generous, for a busy machine.
const deadline = 30 * time.Second

func sh(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return path
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestRestartAndStop: a child that exits on its own is started again
// after the pause (stepped on the test's clock), doubling while it keeps
// exiting; Stop ends it with SIGTERM and starts nothing more.
func TestRestartAndStop(t *testing.T) {
	clk := clock.New(time.Unix(0, 0))
	s := New(Options{Path: sh(t), Args: []string{"-c", "exec sleep 1000"}, Clock: clk, Pause: time.Second, MaxPause: 8 * time.Second})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	for i, pause := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		pid := s.PID()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wait.For(t, deadline, func() bool { return s.Restarts() == int64(i+1) && clk.Waiters() == 1 })
		if got := clk.Pending(); got[0] != pause {
			t.Fatalf("exit %d: pause %v, want %v", i+1, got[0], pause)
		}
		if s.PID() != pid {
			t.Fatalf("exit %d: started again before the pause", i+1)
		}
		clk.Advance(pause)
		wait.For(t, deadline, func() bool { return s.PID() != pid })
	}
	pid := s.PID()
	if err := s.Stop(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("child %d alive after Stop", pid)
	}
	if s.PID() != pid || s.Restarts() != 5 {
		t.Errorf("after Stop: pid %d (was %d), %d restarts", s.PID(), pid, s.Restarts())
	}
}

// TestStopKills: a child that ignores SIGTERM is killed once the grace
// (on the test's clock) is over, and Stop says so.
func TestStopKills(t *testing.T) {
	clk := clock.New(time.Unix(0, 0))
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	s := New(Options{Path: sh(t), Args: []string{"-c", "trap '' TERM; touch " + ready + "; while :; do sleep 1; done"}, Clock: clk})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, deadline, func() bool { _, err := os.Stat(ready); return err == nil })
	pid := s.PID()
	errc := make(chan error, 1)
	go func() { errc <- s.Stop(context.Background(), 10*time.Second) }()
	wait.For(t, deadline, func() bool { p := clk.Pending(); return len(p) == 1 && p[0] == 10*time.Second })
	if !alive(pid) {
		t.Fatal("child gone before the grace was over")
	}
	clk.Advance(10 * time.Second)
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop: %v, want killed", err)
	}
	if alive(pid) {
		t.Fatalf("child %d alive after Stop", pid)
	}
}

// TestFiles: the child's descriptor 3 is the first of Files.
func TestFiles(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := New(Options{Path: sh(t), Args: []string{"-c", "echo from-child >&3; exec sleep 1000"}, Files: []*os.File{w}})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background(), deadline) }()
	_ = w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || line != "from-child\n" {
		t.Fatalf("read %q, %v", line, err)
	}
}

// TestStopUnstarted: Stop before Start returns at once, and Start then
// starts nothing (a server whose Open failed before starting the child).
func TestStopUnstarted(t *testing.T) {
	s := New(Options{Path: sh(t), Args: []string{"-c", "exec sleep 1000"}})
	if err := s.Stop(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil || s.PID() != 0 {
		t.Fatalf("Start after Stop: %v, pid %d", err, s.PID())
	}
}

// TestStartFails: an executable that cannot start is Start's error, and
// nothing keeps trying.
func TestStartFails(t *testing.T) {
	s := New(Options{Path: filepath.Join(t.TempDir(), "none")})
	if err := s.Start(); err == nil {
		t.Fatal("started a missing executable")
	}
	if err := s.Stop(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRenice: every thread of a process that reniced itself has the new
// nice value, those started after too (run in a child: a process cannot
// lower its nice value again).
func TestRenice(t *testing.T) {
	if os.Getenv("SUPERVISE_RENICE") != "" {
		if err := Renice(7); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		done := make(chan struct{})
		for range 8 { // threads the runtime starts later, for goroutines blocked in syscalls
			go func() {
				var ts syscall.Timespec
				ts.Nsec = 50e6
				_ = syscall.Nanosleep(&ts, nil)
				done <- struct{}{}
			}()
		}
		for range 8 {
			<-done
		}
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
			if err != nil {
				continue
			}
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
			fmt.Println(task.Name(), f[16]) // the 19th field of stat: nice
		}
		os.Exit(0)
	}
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestRenice$")
	cmd.Env = append(os.Environ(), "SUPERVISE_RENICE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) < 4 {
		t.Fatalf("threads: %q", out)
	}
	for i := 1; i < len(lines); i += 2 {
		if n, err := strconv.Atoi(lines[i]); err != nil || n != 7 {
			t.Errorf("thread %s has nice %s, want 7 (%s)", lines[i-1], lines[i], out)
		}
	}
}
