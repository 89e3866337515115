// Package loopback hands tests and their harnesses ports on 127.0.0.1 that
// were free a moment ago (nothing listens on them, but another process may
// take one before the caller binds it), and connections to listeners.
package loopback

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreePort returns a loopback port nothing listened on a moment ago and
// that no earlier call in this process returned, below the kernel's
// ephemeral range where it can: a port from that range is soon handed out
// again, to the source end of any outgoing connection or a listener on
// port 0, and may be taken before the child binds it. A port is never
// offered twice in one process: parallel tests pick about a hundred ports
// among some 12,000, and a repeat offered before the first child bound it
// went to two children, one of which could not start.
func FreePort() (int, error) {
	handedMu.Lock()
	defer handedMu.Unlock()
	if lo, ok := ephemeralLow(); ok && lo > firstPort+1000 {
		for range 256 {
			port := firstPort + rand.IntN(lo-firstPort)
			if handed[port] {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err == nil {
				_ = l.Close()
				handed[port] = true
				return port, nil
			}
		}
	}
	for range 256 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free loopback port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handed[port] {
			handed[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find a free loopback port: every port offered was handed out already")
}

// handed are the ports FreePort returned in this process.
var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

// firstPort is the least port FreePort picks: above the well-known and
// most registered services' ports.
const firstPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil
}

// Ports hands out free loopback ports, each at most once: a harness that
// starts several processes gives each its own, though FreePort may offer
// one twice. Another program may still take a port before the child binds
// it; the child then fails to start with a clear error. The zero value is
// ready; it is safe for concurrent use.
type Ports struct {
	mu   sync.Mutex
	used map[int]bool
	free func() (int, error) // FreePort, or a test's
}

// Free returns a loopback port not handed out before.
func (pp *Ports) Free() (int, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.used == nil {
		pp.used = map[int]bool{}
	}
	free := pp.free
	if free == nil {
		free = FreePort
	}
	for range 100 {
		port, err := free()
		if err != nil {
			return 0, err
		}
		if !pp.used[port] {
			pp.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find a free loopback port: every port offered was handed out already")
}

// Addr returns "127.0.0.1:port" for a Free port.
func (pp *Ports) Addr() (string, error) {
	port, err := pp.Free()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
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
