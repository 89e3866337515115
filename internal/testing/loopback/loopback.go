// Package loopback hands tests and their harnesses ports on 127.0.0.1 that
// were free a moment ago (nothing listens on them, but another process may
// take one before the caller binds it), and connections to listeners.
package loopback

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// FreePort returns a loopback port nothing listened on a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Port is FreePort for a test: an error fails t.
func Port(t testing.TB) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Addr returns "127.0.0.1:port" for a Port.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// Dial connects to addr within 10 s, or fails t; the connection closes
// when t ends.
func Dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
