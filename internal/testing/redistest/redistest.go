// Package redistest gives tests a real Redis server: the one at REDIS_ADDR,
// or a redis-server that it starts on a free loopback port.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Environment variables.
const (
	// EnvAddr names an existing server to use instead of starting one.
	EnvAddr = "REDIS_ADDR"
	// EnvRequire, set to 1, turns a missing redis-server into a failure
	// instead of a skip.
	EnvRequire = "FASTLIMIT_REQUIRE_REDIS"
)

// readyTimeout bounds the wait for a started server to answer PING.
const readyTimeout = 5 * time.Second

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
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("redis-server not found and %s=1: %v", EnvRequire, err)
		}
		t.Skip("redis-server not found")
	}
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
	out    *syncBuffer
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

// waitReady waits until the server answers PING.
func (s *server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-s.exited:
			return errors.New("exited before answering PING")
		default:
		}
		err := ping(s.addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %w", readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.exited
	_ = os.RemoveAll(s.dir)
}

func ping(addr string) error {
	v, err := doTimeout(addr, 250*time.Millisecond, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING answered %v", v)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer collects the server's output for error messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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
