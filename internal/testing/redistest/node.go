package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
)

// waitTimeout bounds the waits for a Cluster or a Sentinel setup to form
// and to fail over: generous, for a loaded machine.
const waitTimeout = 30 * time.Second

// nodeArgs are the arguments of a plain node: loopback, no persistence,
// logs on stdout.
func nodeArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	}
}

// lookPath finds a program the way Addr finds redis-server: a missing one
// skips t, or fails it with FASTLIMIT_REQUIRE_REDIS=1.
func lookPath(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s not found and %s=1: %v", name, EnvRequire, err)
		}
		t.Skipf("%s not found", name)
	}
	return path
}

// setupDir makes the directory of a setup's processes and arranges for
// t's end: the setup's logs if t failed, then stop.
func setupDir(t testing.TB, what string, logs func() string, stop func()) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "redistest-"+what+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("redis %s logs:\n%s", what, logs())
		}
		stop()
	})
	return dir
}

// proc is one redis-server process: the shared server, a test's own, or
// a node or a sentinel of a Cluster or a Sentinel setup. It dies with the
// test binary (on Linux).
type proc struct {
	addr string
	dir  string
	*child.Process
}

// startProc starts path in a fresh directory under parent, on a free
// loopback port, with the arguments args(port, dir) returns, and waits
// until it answers PING. A port taken between choosing and binding it
// makes it try again with another.
func startProc(name, path, parent string, args func(port int, dir string) ([]string, error)) (*proc, error) {
	var errs []error
	for attempt := range 3 {
		dir, err := os.MkdirTemp(parent, strings.ReplaceAll(name, " ", "")+"-")
		if err != nil {
			return nil, err
		}
		port, err := loopback.FreePort()
		if err != nil {
			return nil, err
		}
		argv, err := args(port, dir)
		if err != nil {
			return nil, err
		}
		p, err := launch(name, path, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir, argv)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, attempt %d, port %d: %w", name, attempt+1, port, err))
			continue
		}
		return p, nil
	}
	return nil, errors.Join(errs...)
}

// launch runs path with argv in dir and waits until it answers PING at
// addr. On failure it has stopped the process and removed dir, and the
// error holds the process' output.
func launch(name, path, addr, dir string, argv []string) (*proc, error) {
	c, err := child.Start(name, exec.Command(path, argv...))
	if err != nil {
		return nil, err
	}
	p := &proc{addr: addr, dir: dir, Process: c}
	if err := p.waitReady(); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w; output:\n%s", err, p.Output())
	}
	return p, nil
}

// logs formats the output of procs for a failure message.
func logs(procs []*proc, n int) string {
	var b strings.Builder
	for _, p := range procs {
		state := "running"
		if !p.Alive() {
			state = "exited"
		}
		fmt.Fprintf(&b, "--- %s %s (%s), last %d lines:\n%s\n", p.Name, p.addr, state, n, p.Tail(n))
	}
	return b.String()
}

// do sends one command to the server at addr on a connection of its own,
// through go-redis, and returns its reply: a string, an int64, nil, or a
// []any of those.
func do(addr string, args ...string) (any, error) {
	return doTimeout(addr, 2*time.Second, args...)
}

func doTimeout(addr string, d time.Duration, args ...string) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: d, DialerRetries: 1, PoolSize: 1, ContextTimeoutEnabled: true})
	defer c.Close()
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	v, err := c.Do(ctx, a...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// doString is do for commands that answer a string.
func doString(addr string, args ...string) (string, error) {
	v, err := do(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s answered %T, want a string", args[0], v)
	}
	return s, nil
}

// infoField returns field's value in an INFO-style "key:value" text.
func infoField(text, field string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
