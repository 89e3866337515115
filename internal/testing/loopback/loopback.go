// Package loopback hands tests and their harnesses ports on 127.0.0.1 that
// were free a moment ago: nothing listens on them, but another process may
// take one before the caller binds it.
package loopback

import (
	"fmt"
	"net"
	"strconv"
	"testing"
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
