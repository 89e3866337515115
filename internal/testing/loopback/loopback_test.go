package loopback

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePort: the ports are free, and below the kernel's ephemeral range
// when it is known and leaves room.
func TestFreePort(t *testing.T) {
	lo, known := ephemeralLow()
	for range 20 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if known && lo > firstPort+1000 && (port < firstPort || port >= lo) {
			t.Errorf("port %d, want it in [%d, %d)", port, firstPort, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		_ = l.Close()
	}
}

// TestPortsOnce: a port FreePort offers again is not handed out twice.
func TestPortsOnce(t *testing.T) {
	offers := []int{30001, 30001, 30002}
	n := 0
	pp := Ports{free: func() (int, error) {
		n++
		return offers[(n-1)%len(offers)], nil
	}}
	for _, want := range []int{30001, 30002} {
		if got, err := pp.Free(); err != nil || got != want {
			t.Fatalf("Free() = %d, %v; want %d", got, err, want)
		}
	}
	if got, err := pp.Free(); err == nil {
		t.Fatalf("Free() = %d once every offer was handed out, want an error", got)
	}
}

// TestFreePortOnce: FreePort never returns a port twice in a process,
// though nothing binds the ports it returns (a second child would then
// fail to bind one the first had not yet bound).
func TestFreePortOnce(t *testing.T) {
	// On a set of its own, so that -count=20 in one process does not use
	// up the range below the ephemeral one that TestFreePort checks.
	handedMu.Lock()
	saved := handed
	handed = map[int]bool{}
	handedMu.Unlock()
	t.Cleanup(func() {
		handedMu.Lock()
		handed = saved
		handedMu.Unlock()
	})
	seen := map[int]bool{}
	for range 2000 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d offered twice", port)
		}
		seen[port] = true
	}
}
