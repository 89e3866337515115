// Package redistest gives tests a real Redis server: the one at REDIS_ADDR,
// or a redis-server that it starts on a free loopback port.
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
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// Environment variables.
const (
	// EnvAddr names an existing server to use instead of starting one.
	EnvAddr = "REDIS_ADDR"
	// EnvRequire, set to 1, turns a missing redis-server into a failure
	// instead of a skip.
	EnvRequire = "FASTLIMIT_REQUIRE_REDIS"
)

// readyTimeout bounds the wait for a started server to answer PING:
// generous, for a loaded machine.
const readyTimeout = 10 * time.Second

var (
	once   sync.Once
	srv    *server
	srvErr error
)

// Addr returns the host:port of a Redis server for t. With REDIS_ADDR set
// it returns that. Otherwise it starts redis-server once per test binary,
// without persistence, and reuses it; Main stops it when the tests end, and
// on Linux it also dies with the test binary. Without redis-server on PATH,
// Addr skips t, or fails it if FASTLIMIT_REQUIRE_REDIS=1.
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv(EnvAddr); addr != "" {
		return addr
	}
	path := lookPath(t, "redis-server")
	once.Do(func() { srv, srvErr = start(path) })
	if srvErr != nil {
		t.Fatalf("start redis-server: %v", srvErr)
	}
	return srv.addr
}

// Main runs the tests and then stops the server that Addr started, if
// any. Call it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the server that Addr started, if any. Addr must not be called
// after Stop.
func Stop() {
	if srv != nil {
		srv.stop()
	}
}

type server struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	out    *child.Output
}

// start starts the shared server: a plain node, as the Cluster and
// Sentinel setups start theirs.
func start(path string) (*server, error) {
	p, err := startProc("redis", path, "", func(port int, dir string) ([]string, error) {
		return nodeArgs(port, dir), nil
	})
	if err != nil {
		return nil, err
	}
	return p.server, nil
}

// errExited is why waitReady stops when the process exits first.
var errExited = errors.New("exited before answering PING")

// waitReady waits until the server answers PING.
func (s *server) waitReady() error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case <-s.exited:
			cancel(errExited)
		case <-ctx.Done():
		}
	}()
	return wait.Until(ctx, readyTimeout, func() error { return ping(s.addr) })
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.exited
	_ = os.RemoveAll(s.dir)
}

func ping(addr string) error {
	// Dial first: go-redis logs every dial that fails.
	c, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	_ = c.Close()
	v, err := doTimeout(addr, 250*time.Millisecond, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING answered %v", v)
	}
	return nil
}

// DeleteKeys deletes every key of rdb that starts with prefix.
func DeleteKeys(t testing.TB, rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("delete %s*: %v", prefix, err)
	}
}

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

// proc is one redis-server process (a node or a sentinel) of a Cluster or
// a Sentinel setup. Like Addr's server, it dies with the test binary.
type proc struct {
	name string // for logs: "node 1", "sentinel 2"
	*server
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
		s, err := launch(path, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir, argv)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, attempt %d, port %d: %w", name, attempt+1, port, err))
			continue
		}
		return &proc{name: name, server: s}, nil
	}
	return nil, errors.Join(errs...)
}

// launch runs path with argv in dir and waits until it answers PING at
// addr. On failure it has stopped the process and removed dir, and the
// error holds the process' output.
func launch(path, addr, dir string, argv []string) (*server, error) {
	s := &server{addr: addr, dir: dir, exited: make(chan struct{}), out: &child.Output{}}
	s.cmd = exec.Command(path, argv...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := child.Run(s.cmd, s.exited); err != nil {
		return nil, err
	}
	if err := s.waitReady(); err != nil {
		s.stop()
		return nil, fmt.Errorf("%w; output:\n%s", err, s.out.String())
	}
	return s, nil
}

// kill ends the process at once (SIGKILL) and waits for it, keeping its
// directory and output. It is idempotent.
func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	<-p.exited
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// tail returns the last n lines of the process' output.
func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.out.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logs formats the output of procs for a failure message.
func logs(procs []*proc, n int) string {
	var b strings.Builder
	for _, p := range procs {
		state := "running"
		if !p.alive() {
			state = "exited"
		}
		fmt.Fprintf(&b, "--- %s %s (%s), last %d lines:\n%s\n", p.name, p.addr, state, n, p.tail(n))
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
