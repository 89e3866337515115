package xds_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fastlimit/fastlimit/internal/source/xds"
	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/xdstest"
)

const (
	node = "test-node"
	// wait bounds every wait for something that should happen at once,
	// generously for a loaded machine.
	wait = 10 * time.Second
)

// sink is the Apply of a test: it accepts RateLimitConfigs unless their
// domain is "bad", and keeps the domains of the last accepted response.
type sink struct {
	mu      sync.Mutex
	domains []string
	applied int // responses applied
	calls   int // calls of apply, rejected ones included
	changed chan struct{}
}

func newSink() *sink { return &sink{changed: make(chan struct{})} }

func (s *sink) apply(_ context.Context, res []*anypb.Any) error {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	var domains []string
	for _, a := range res {
		var c rlsconf.RateLimitConfig
		if err := a.UnmarshalTo(&c); err != nil {
			return err
		}
		if c.GetDomain() == "bad" {
			return fmt.Errorf("resource '%s': domain 'bad' is refused", c.GetName())
		}
		domains = append(domains, c.GetDomain())
	}
	slices.Sort(domains)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.domains = domains
	s.applied++
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// current returns the domains in force and how many responses were applied.
func (s *sink) current() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.domains, s.applied
}

// servingAlpha starts a server whose v1 holds domain alpha and a client
// of it, and waits until alpha is in force; it returns the client's clock.
func servingAlpha(t *testing.T) (*xdstest.Server, *sink, *clock.Clock) {
	t.Helper()
	srv := xdstest.Start(t, nil)
	srv.Set(t, node, "v1", xdstest.Config("a", "alpha"))
	s := newSink()
	opts, clk := fast(srv.Addr)
	open(t, opts, s)
	s.waitFor(t, "alpha")
	return srv, s, clk
}

// waitFor waits until the domains in force are want.
func (s *sink) waitFor(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		s.mu.Lock()
		got, changed := s.domains, s.changed
		s.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("domains in force %v, want %v", got, want)
		}
	}
}

// Waits of the tests' clients, on their fake clocks.
const (
	backoffInitial = 20 * time.Millisecond
	connectRetry   = 50 * time.Millisecond
	nackPause      = 70 * time.Millisecond
)

// fast are the Options of a client on a fake clock of its own: every wait
// between two attempts waits for the test to advance it.
func fast(addr string) (xds.Options, *clock.Clock) {
	clk := clock.New(time.Now()) // certtest's certificates are valid now
	return xds.Options{
		ServerURL:    addr,
		TypeURL:      xdstest.TypeURL,
		NodeID:       node,
		Backoff:      xds.Backoff{Initial: backoffInitial, Max: 100 * time.Millisecond, Factor: 2, Jitter: true},
		ConnectRetry: connectRetry,
		NackPause:    nackPause,
		Clock:        clk,
	}, clk
}

// waiting waits until the client waits on clk, for a time in [lo, hi].
func waiting(t *testing.T, clk *clock.Clock, what string, lo, hi time.Duration) {
	t.Helper()
	clk.WaitFor(t, what, func(p []time.Duration) bool { return len(p) == 1 && p[0] >= lo && p[0] <= hi })
}

// reconnect waits until the client waits to reconnect, and ends the wait.
func reconnect(t *testing.T, clk *clock.Clock) {
	t.Helper()
	clk.BlockUntil(t, 1)
	clk.AdvanceNext()
}

// connectRetrying waits until the client waits ConnectRetry, give or take
// half, after a failed connection.
func connectRetrying(t *testing.T, clk *clock.Clock) {
	t.Helper()
	waiting(t, clk, "the connect retry", connectRetry/2, connectRetry*3/2)
}

func open(t *testing.T, opts xds.Options, s *sink) *xds.Client {
	t.Helper()
	c := xds.New(opts, s.apply, zaptest.NewLogger(t))
	c.Open(context.Background())
	t.Cleanup(c.Close)
	return c
}

func TestSnapshotsApplied(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(t, node, "v1", xdstest.Config("a", "alpha", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1)))
	s := newSink()
	opts, _ := fast(srv.Addr)
	opts.NodeMetadata = map[string]string{"cluster": "east", "role": "ratelimit"}
	opts.Headers = map[string]string{"authorization": "Bearer t0ken", "x-team": "edge"}
	opts.UserAgentName, opts.UserAgentVersion = "fastlimit", "test"
	open(t, opts, s)

	s.waitFor(t, "alpha")
	ack, err := srv.WaitACK(wait, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if ack.GetTypeUrl() != xdstest.TypeURL {
		t.Errorf("type %q", ack.GetTypeUrl())
	}
	first := srv.Requests()[0]
	n := first.GetNode()
	if n.GetId() != node || n.GetUserAgentName() != "fastlimit" || n.GetUserAgentVersion() != "test" {
		t.Errorf("node %v", n)
	}
	md := n.GetMetadata().GetFields()
	if md["cluster"].GetStringValue() != "east" || md["role"].GetStringValue() != "ratelimit" || len(md) != 2 {
		t.Errorf("node metadata %v", md)
	}
	h := srv.Headers()[0]
	if got := h.Get("authorization"); !slices.Equal(got, []string{"Bearer t0ken"}) {
		t.Errorf("authorization header %q", got)
	}
	if got := h.Get("x-team"); !slices.Equal(got, []string{"edge"}) {
		t.Errorf("x-team header %q", got)
	}

	srv.Set(t, node, "v2",
		xdstest.Config("a", "alpha", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1)),
		xdstest.Config("b", "beta", xdstest.Limit("k", "", rlsconf.RateLimitUnit_MINUTE, 5)))
	s.waitFor(t, "alpha", "beta")
	if _, err := srv.WaitACK(wait, "v2"); err != nil {
		t.Fatal(err)
	}
	// An empty snapshot is a state like any other.
	srv.Set(t, node, "v3")
	s.waitFor(t)
	if _, err := srv.WaitACK(wait, "v3"); err != nil {
		t.Fatal(err)
	}
	if n := srv.NACKs(); n != 0 {
		t.Errorf("%d NACKs", n)
	}
}

func TestBadSnapshotNACKed(t *testing.T) {
	srv, s, clk := servingAlpha(t)
	if _, err := srv.WaitACK(wait, "v1"); err != nil {
		t.Fatal(err)
	}
	_, appliedBefore := s.current()

	// Several resources, so that the cache's map order varies between
	// the resends.
	srv.Set(t, node, "v2", xdstest.Config("a", "alpha"), xdstest.Config("b", "beta"), xdstest.Config("c", "gamma"),
		xdstest.Config("d", "delta"), xdstest.Config("oops", "bad"))
	nack, err := srv.WaitNACK(wait)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := nack.GetErrorDetail().GetMessage(), "resource 'oops': domain 'bad' is refused"; got != want {
		t.Errorf("NACK message %q, want %q", got, want)
	}
	// A NACK carries the version in force, not the one refused.
	if nack.GetVersionInfo() != "v1" {
		t.Errorf("NACK version %q, want v1", nack.GetVersionInfo())
	}
	// go-control-plane's cache sends the refused snapshot straight back
	// on every NACK: the client pauses NackPause before each NACK of it
	// instead of spinning, and does not apply what it refused again.
	for i := 1; i <= 3; i++ {
		waiting(t, clk, "the NACK pause", nackPause, nackPause)
		if n := srv.NACKs(); n != i {
			t.Fatalf("%d NACKs before pause %d ends, want %d", n, i, i)
		}
		clk.Advance(nackPause)
		if _, err := srv.Wait(wait, func(*discovery.DiscoveryRequest) bool { return srv.NACKs() > i }); err != nil {
			t.Fatalf("no NACK after pause %d: %v", i, err)
		}
	}
	domains, applied := s.current()
	if !slices.Equal(domains, []string{"alpha"}) || applied != appliedBefore {
		t.Errorf("after a NACK: domains %v applied %d times, want [alpha] %d times", domains, applied, appliedBefore)
	}
	s.mu.Lock()
	calls := s.calls
	s.mu.Unlock()
	if calls != appliedBefore+1 {
		t.Errorf("apply called %d times, want %d: a resent rejected snapshot was checked again", calls, appliedBefore+1)
	}

	// A good snapshot after a bad one is applied, once the pause ends.
	srv.Set(t, node, "v3", xdstest.Config("c", "gamma"))
	waiting(t, clk, "the NACK pause", nackPause, nackPause)
	clk.Advance(nackPause)
	s.waitFor(t, "gamma")
	if _, err := srv.WaitACK(wait, "v3"); err != nil {
		t.Fatal(err)
	}
}

// TestReconnectAfterServerRestart: a stream that ends after a response
// reconnects after Backoff's first wait; failed connections retry after
// ConnectRetry, give or take half; once the server is back, its state is
// applied.
func TestReconnectAfterServerRestart(t *testing.T) {
	srv, s, clk := servingAlpha(t)

	srv.Stop()
	srv.Set(t, node, "v2", xdstest.Config("b", "beta"))
	waiting(t, clk, "the backoff after a stream that delivered", backoffInitial, backoffInitial)
	for range 3 { // failed connection attempts
		clk.AdvanceNext()
		connectRetrying(t, clk)
	}
	if d, _ := s.current(); !slices.Equal(d, []string{"alpha"}) {
		t.Errorf("while the server is down: %v", d)
	}
	srv.Resume(t)
	clk.AdvanceNext()
	s.waitFor(t, "beta")
	if _, err := srv.WaitACK(wait, "v2"); err != nil {
		t.Fatal(err)
	}

	// A restarted server that reuses a version name still sends its
	// state: each stream starts without a version.
	srv.Stop()
	srv.Set(t, node, "v1", xdstest.Config("c", "gamma"))
	waiting(t, clk, "the backoff after a stream that delivered", backoffInitial, backoffInitial)
	srv.Resume(t)
	clk.AdvanceNext()
	s.waitFor(t, "gamma")
}

func TestServerNotUpYet(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Stop()
	s := newSink()
	opts, clk := fast(srv.Addr)
	open(t, opts, s)
	connectRetrying(t, clk)
	srv.Set(t, node, "v1", xdstest.Config("a", "alpha"))
	srv.Resume(t)
	clk.AdvanceNext()
	s.waitFor(t, "alpha")
}

func TestTLS(t *testing.T) {
	certs := certtest.NewFiles(t, xdstest.ServerName)
	cases := []struct {
		name    string
		mtls    bool
		tls     *xds.TLS
		connect bool
	}{
		{"tls", false, &xds.TLS{CAFile: certs.CAFile}, true},
		{"tls with server name", false, &xds.TLS{CAFile: certs.CAFile, ServerName: xdstest.ServerName}, true},
		{"tls wrong server name", false, &xds.TLS{CAFile: certs.CAFile, ServerName: "other.test"}, false},
		{"tls unknown CA", false, &xds.TLS{}, false},
		{"mtls", true, &xds.TLS{CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, true},
		{"mtls without client certificate", true, &xds.TLS{CAFile: certs.CAFile}, false},
		{"plaintext to tls", false, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := xdstest.Start(t, certs.ServerTLS(tc.mtls))
			srv.Set(t, node, "v1", xdstest.Config("a", "alpha"))
			s := newSink()
			opts, clk := fast(srv.Addr)
			opts.TLS = tc.tls
			open(t, opts, s)
			if tc.connect {
				s.waitFor(t, "alpha")
				if _, err := srv.WaitACK(wait, "v1"); err != nil {
					t.Fatal(err)
				}
				return
			}
			// Several connection attempts all fail.
			for range 3 {
				clk.BlockUntil(t, 1)
				clk.AdvanceNext()
			}
			clk.BlockUntil(t, 1)
			if d, n := s.current(); n != 0 {
				t.Errorf("connected and applied %v", d)
			}
			if r := srv.Requests(); len(r) != 0 {
				t.Errorf("server got %d requests", len(r))
			}
		})
	}
}

func TestTLSConfigErrors(t *testing.T) {
	certs := certtest.NewFiles(t, xdstest.ServerName)
	cases := []struct {
		name string
		tls  xds.TLS
		want string
	}{
		{"cert without key", xds.TLS{CertFile: certs.ClientCert}, "needs both"},
		{"key without cert", xds.TLS{KeyFile: certs.ClientKey}, "needs both"},
		{"missing cert", xds.TLS{CertFile: "/nonexistent.pem", KeyFile: certs.ClientKey}, "load client certificate"},
		{"missing CA", xds.TLS{CAFile: "/nonexistent.pem"}, "read CA"},
		{"CA not PEM", xds.TLS{CAFile: certs.ClientKey}, "no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.tls.Config()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	good := xds.TLS{CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, ServerName: "x"}
	cfg, err := good.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServerName != "x" || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Errorf("config %+v", cfg)
	}
}

func TestCloseStopsClient(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(t, node, "v1", xdstest.Config("a", "alpha"))
	s := newSink()
	opts, _ := fast(srv.Addr)
	c := xds.New(opts, s.apply, zaptest.NewLogger(t))
	c.Open(context.Background())
	s.waitFor(t, "alpha")
	done := make(chan struct{})
	go func() {
		c.Close()
		c.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Close did not return")
	}
	// After Close nothing more is applied.
	srv.Set(t, node, "v2", xdstest.Config("b", "beta"))
	_, err := srv.Wait(300*time.Millisecond, func(r *discovery.DiscoveryRequest) bool { return r.GetVersionInfo() == "v2" })
	if err == nil {
		t.Error("a closed client answered a new snapshot")
	}
	if d, _ := s.current(); !slices.Equal(d, []string{"alpha"}) {
		t.Errorf("domains %v after Close", d)
	}
}

func TestApplyErrorTruncated(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(t, node, "v1", xdstest.Config("a", "alpha"))
	long := strings.Repeat("x", 100<<10)
	opts, _ := fast(srv.Addr)
	c := xds.New(opts, func(context.Context, []*anypb.Any) error { return errors.New(long) }, zaptest.NewLogger(t))
	c.Open(context.Background())
	t.Cleanup(c.Close)
	nack, err := srv.WaitNACK(wait)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(nack.GetErrorDetail().GetMessage()); n > 17<<10 || n < 16<<10 {
		t.Errorf("NACK message of %d bytes", n)
	}
}
