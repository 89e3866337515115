package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// testServer opens a server on loopback ports chosen by the kernel, with
// the memory store and rules from files, and closes it when the test ends.
func testServer(t *testing.T, rules map[string]string, args ...string) (*Server, string) {
	t.Helper()
	dir := files.Dir(t, rules)
	return testServerOn(t, dir, zaptest.NewLogger(t), args...), dir
}

func testServerOn(t *testing.T, dir string, log *zap.Logger, args ...string) *Server {
	t.Helper()
	s := newServer(t, log, loopbackArgs(dir, args...)...)
	if err := s.Open(context.Background()); err != nil {
		_ = s.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

// newServer makes a server of args and no environment, not opened.
func newServer(t *testing.T, log *zap.Logger, args ...string) *Server {
	t.Helper()
	s, err := New(parseSettings(t, args, func(string) string { return "" }), log, prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// loopbackArgs are the arguments of a server on the rules in dir, on
// loopback ports chosen by the kernel, without a drain, then args.
func loopbackArgs(dir string, args ...string) []string {
	return append([]string{"--config", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--admin-addr", "127.0.0.1:0", "--drain", "0s"}, args...)
}

// rlsRequest is a request of one descriptor of key=value pairs.
func rlsRequest(domain string, kv ...string) *rlspb.RateLimitRequest {
	d := &common.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*common.RateLimitDescriptor{d}}
}

func TestAdminDisabled(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--admin-addr", "")
	if s.AdminAddr() != "" {
		t.Fatalf("admin listens on %s", s.AdminAddr())
	}
}

func TestAdminAddrInUse(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	dir := files.Dir(t, map[string]string{"adm.yaml": adminRules})
	s2 := newServer(t, zaptest.NewLogger(t), loopbackArgs(dir, "--admin-addr", s.AdminAddr())...)
	err := s2.Open(context.Background())
	_ = s2.Close(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen admin") {
		t.Fatalf("Open on a taken admin address: %v", err)
	}
	// The message says which setting to change, and how to turn it off.
	for _, want := range []string{"(--admin-addr)", "--admin-addr off", "ADMIN_ADDR=off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestReadyFollowsDraining(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	ready := "http://" + s.HTTPAddr() + "/ready"
	if code, body := scrape.Get(t, ready); code != http.StatusOK {
		t.Fatalf("/ready %d %s", code, body)
	}
	s.draining.Store(true)
	defer s.draining.Store(false)
	if code, _ := scrape.Get(t, ready); code != http.StatusServiceUnavailable {
		t.Fatalf("/ready while draining: %d", code)
	}
}

func TestCloseBoundsAndOrder(t *testing.T) {
	dir := files.Dir(t, map[string]string{"adm.yaml": adminRules})
	s := newServer(t, zaptest.NewLogger(t), loopbackArgs(dir, "--drain", "200ms")...)
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	ready, admin := "http://"+s.HTTPAddr()+"/ready", "http://"+s.AdminAddr()+"/metrics"
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Close(context.Background()) }()
	// While draining: readiness fails, metrics still answer.
	wait.For(t, time.Second, func() bool { c, _ := scrape.Get(t, ready); return c == http.StatusServiceUnavailable })
	if c, _ := scrape.Get(t, admin); c != http.StatusOK {
		t.Fatalf("admin during drain: %d", c)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Close took %s with --drain 200ms", took)
	}
	if _, err := http.Get(admin); err == nil {
		t.Fatal("admin still answers after Close")
	}
}

// parseSettings parses args and the environment getenv reads as the
// server's main does.
func parseSettings(t testing.TB, args []string, getenv func(string) string) *settings.Settings {
	t.Helper()
	o, err := settings.Parse("test", args, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// adminRules are the rules of the lifecycle tests.
const adminRules = `
domain: adm
descriptors:
  - key: win
    rate_limit: {unit: minute, requests_per_unit: 5}
`
