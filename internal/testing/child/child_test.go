package child_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// deadline bounds every wait of these tests: generous, for a loaded
// machine.
const deadline = 30 * time.Second

func sh(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return path
}

func waitExit(t *testing.T, p *child.Process) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(deadline):
		t.Fatalf("%s still runs after %v", p.Name, deadline)
	}
}

// TestOutput: a child's stdout and stderr are kept, Tail keeps the last
// lines, and Failure names the exit status.
func TestOutput(t *testing.T) {
	p, err := child.Start("printer", exec.Command(sh(t), "-c", "echo one; echo two >&2; echo three; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	waitExit(t, p)
	if got := p.Output(); got != "one\ntwo\nthree\n" {
		t.Errorf("Output() = %q", got)
	}
	if got := p.Tail(2); got != "two\nthree" {
		t.Errorf("Tail(2) = %q", got)
	}
	if p.Alive() {
		t.Error("Alive() after exit")
	}
	var ee *exec.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Wait() = %v, want exit status 3", err)
	}
	if msg := p.Failure(os.ErrClosed).Error(); !strings.Contains(msg, "printer") || !strings.Contains(msg, "exit status 3") ||
		!strings.Contains(msg, "three") {
		t.Errorf("Failure: %s", msg)
	}
}

// TestStopKillsAfterGrace: a child that ignores SIGTERM is killed once the
// grace has passed, and Stop and Kill may be called again.
func TestStopKillsAfterGrace(t *testing.T) {
	p, err := child.Start("stubborn", exec.Command(sh(t), "-c", `trap "" TERM; echo ready; exec sleep 600`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if !wait.True(deadline, func() bool { return strings.Contains(p.Output(), "ready") }) {
		t.Fatalf("not ready: %q", p.Output())
	}
	stopped := make(chan struct{})
	go func() {
		p.Stop(100 * time.Millisecond)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(deadline):
		t.Fatal("Stop did not return")
	}
	if p.Alive() {
		t.Fatal("Alive() after Stop")
	}
	p.Stop(time.Second)
	p.Kill()
}

// TestGroup: each process logs to its own file in Dir, Stop forgets one,
// StopAll stops the rest, and the environment is exactly the one given.
func TestGroup(t *testing.T) {
	g := &child.Group{Dir: t.TempDir(), Grace: time.Second}
	t.Cleanup(g.StopAll)
	a, err := g.Start("a/b (1)", sh(t), []string{"-c", `echo "x=$X"; exec sleep 600`}, []string{"X=1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Start("b", sh(t), []string{"-c", "exec sleep 600"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !wait.True(deadline, func() bool { return a.Output() == "x=1\n" }) {
		t.Fatalf("a's output: %q", a.Output())
	}
	if _, err := os.Stat(filepath.Join(g.Dir, "01-a-b-1.log")); err != nil {
		t.Error(err)
	}
	g.Stop(a)
	if a.Alive() || !b.Alive() {
		t.Fatalf("after Stop(a): a alive %v, b alive %v", a.Alive(), b.Alive())
	}
	g.StopAll()
	waitExit(t, b)
}

// TestEnv: the caller's variables stay out, except those the child needs.
func TestEnv(t *testing.T) {
	t.Setenv("FASTLIMIT_CHILD_TEST", "leak")
	t.Setenv("PATH", "/bin")
	env := child.Env("A=1")
	if strings.Contains(strings.Join(env, " "), "FASTLIMIT_CHILD_TEST") {
		t.Errorf("Env() = %q, holds the caller's variable", env)
	}
	if env[0] != "PATH=/bin" || env[len(env)-1] != "A=1" {
		t.Errorf("Env() = %q", env)
	}
}
