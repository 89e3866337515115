package e2e_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// tcpRules allow each client address two connections a day.
const tcpRules = `domain: envoy-tcp
descriptors:
  - key: listener
    value: tcp
    descriptors:
      - key: client
        rate_limit: {name: connections_per_client, unit: day, requests_per_unit: 2}
`

// echoOnce connects to addr from src, sends a line and returns what came
// back: the line, or an error when Envoy closed the connection first.
func echoOnce(addr, src string) (string, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// TestEnvoyNetworkFilter puts envoy.filters.network.ratelimit in front of
// tcp_proxy: a client's first two connections reach the echo upstream,
// the third is closed by Envoy without reaching it.
func TestEnvoyNetworkFilter(t *testing.T) {
	fl := startAdmin(t, files.Dir(t, map[string]string{"t.yaml": tcpRules}))
	up := envoytest.StartTCPUpstream(t)
	f := startFront(t, "tcp", envoyTemplate(t, "tcp.yaml"), map[string]string{tmplRLS: fl.GRPC, tmplTCP: up.Addr})
	errs := func() int64 { n, _ := f.Stat("ratelimit.tcp_rl.error"); return n }
	var client string
	attempt(t, f, 24*time.Hour, func(c *envoytest.Client) error {
		client = c.Source
		before, accepted := errs(), up.Accepted()
		for i := 1; i <= 3; i++ {
			got, err := echoOnce(f.Listener, c.Source)
			if errs() != before {
				return fmt.Errorf("%w: Envoy's rate-limit call failed", errInconclusive)
			}
			if i < 3 && (err != nil || got != "ping\n") {
				return fmt.Errorf("connection %d: %q, %v; want the echo", i, got, err)
			}
			if i == 3 && (err == nil || got != "" || !errors.Is(err, io.EOF) && !isReset(err)) {
				return fmt.Errorf("connection 3: %q, %v; want it closed without an echo", got, err)
			}
		}
		if n := up.Accepted() - accepted; n != 2 {
			return fmt.Errorf("the upstream accepted %d connections, want 2", n)
		}
		return nil
	})
	if n, _ := f.Stat("ratelimit.tcp_rl.over_limit"); n < 1 {
		t.Errorf("Envoy counted %d connections over the limit", n)
	}
	// The descriptor's client entry is the connection's address.
	got := topDescriptors(t, fl, "envoy-tcp")["envoy-tcp.listener_tcp.client"]
	if !slices.Contains(got, "listener=tcp,client="+client) {
		t.Errorf("FastLimit decided %v, want listener=tcp,client=%s among them", got, client)
	}
}

// isReset reports whether err is a connection reset by the peer.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
