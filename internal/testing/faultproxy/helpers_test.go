package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// ioTimeout bounds each wait of these tests: generous, for a loaded
// machine.
const ioTimeout = 10 * time.Second

// rawClient speaks RESP over one connection, command by command, so that
// a test sees exactly what the proxy delivers.
type rawClient struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawClient{t: t, c: c, r: bufio.NewReader(c)}
}

// send writes commands, each a RESP array of bulk strings, in one write.
func (c *rawClient) send(cmds ...[]string) {
	c.t.Helper()
	var b []byte
	for _, args := range cmds {
		b = fmt.Appendf(b, "*%d\r\n", len(args))
		for _, a := range args {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	_ = c.c.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads one reply.
func (c *rawClient) read() (faultproxy.Value, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(ioTimeout))
	return faultproxy.ReadValue(c.r)
}

// mustRead reads one reply and fails the test on a read error.
func (c *rawClient) mustRead() faultproxy.Value {
	c.t.Helper()
	v, err := c.read()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return v
}

// do sends one command and reads its reply.
func (c *rawClient) do(args ...string) faultproxy.Value {
	c.t.Helper()
	c.send(args)
	return c.mustRead()
}

// readAsync reads one reply on another goroutine.
func (c *rawClient) readAsync() <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		v, err := c.read()
		ch <- readResult{v, err}
	}()
	return ch
}

type readResult struct {
	v   faultproxy.Value
	err error
}

func cmd(args ...string) []string { return args }

// wantValue fails t unless got is want.
func wantValue(t testing.TB, got, want faultproxy.Value) {
	t.Helper()
	if string(got.Bytes()) != string(want.Bytes()) {
		t.Fatalf("reply %v, want %v", got, want)
	}
}

// direct is a go-redis client straight to Redis, to check what Redis did.
func direct(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// viaProxy is a go-redis client through the proxy with one connection,
// which never retries.
func viaProxy(t testing.TB, addr string, change ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, PoolSize: 1, PipelinePoolSize: -1, MaxRetries: -1, DialTimeout: ioTimeout,
		ReadTimeout: ioTimeout, WriteTimeout: ioTimeout}
	for _, f := range change {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var keySeq atomic.Int64

// key returns a key no other test uses.
func key(t testing.TB) string {
	return "faultproxy:" + t.Name() + ":" + strconv.FormatInt(keySeq.Add(1), 10) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*ioTimeout)
	t.Cleanup(cancel)
	return c
}

// counter reads an integer key straight from Redis; 0 when it is absent.
func counter(t testing.TB, rdb *redis.Client, k string) int64 {
	t.Helper()
	n, err := rdb.Get(ctx(t), k).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", k, err)
	}
	return n
}
