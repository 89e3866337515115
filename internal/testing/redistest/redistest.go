// Package redistest gives tests a real Redis server: the one at REDIS_ADDR,
// or a redis-server that it starts on a free loopback port.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	srv    *proc
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

// start starts the shared server: a plain node, as the Cluster and
// Sentinel setups start theirs.
func start(path string) (*proc, error) {
	return startProc("redis", path, "", func(port int, dir string) ([]string, error) {
		return nodeArgs(port, dir), nil
	})
}

// errExited is why waitReady stops when the process exits first.
var errExited = errors.New("exited before answering PING")

// waitReady waits until the server answers PING and INFO names its own
// process: another test's server may hold the port this one failed to bind,
// and would answer PING in its place.
func (s *proc) waitReady() error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case <-s.Exited():
			cancel(errExited)
		case <-ctx.Done():
		}
	}()
	return wait.Until(ctx, readyTimeout, func() error {
		if err := ping(s.addr); err != nil {
			return err
		}
		return s.owns()
	})
}

// owns checks that the server answering at s.addr is s's own process.
func (s *proc) owns() error {
	info, err := doString(s.addr, "INFO", "server")
	if err != nil {
		return err
	}
	if pid := infoField(info, "process_id"); pid != strconv.Itoa(s.Pid()) {
		return fmt.Errorf("%s is served by process %s, not %d", s.addr, pid, s.Pid())
	}
	return nil
}

// stop kills the process and removes its directory.
func (s *proc) stop() {
	s.Kill()
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
