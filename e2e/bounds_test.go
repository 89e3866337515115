package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/rawh2"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// The bounds tests are issue 19's attacks on the real binary: a flood of
// idle connections, and 100,000 calls on one connection that never send
// their request. Both run on the embedded store: the attacks are on the
// gRPC listener, not on Redis.

// shouldRateLimit is the full gRPC name of ShouldRateLimit.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// openFDs counts a process's open file descriptors.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	return len(entries)
}

// TestIdleConnectionFlood runs the binary under an open-files limit of
// 1024, which caps gRPC connections at 1024 - 3 HTTP listeners x 64 - 64
// = 768, and opens 868 connections that send the HTTP/2 preface and
// SETTINGS and nothing more. At the cap: the 100 past it are closed and
// counted, the process keeps descriptors free, /healthcheck answers, and
// a new client is refused cleanly (Unavailable) or decides. Once the
// flood leaves, a client decides without a restart.
func TestIdleConnectionFlood(t *testing.T) {
	const nofile, wantCap, extra = 1024, 1024 - 3*64 - 64, 100
	admin := loopback.Addr(t)
	srv := start(t, launch{rules: files.Dir(t, map[string]string{"b.yaml": boundsRules}), nofile: nofile,
		flags: []string{"--admin-addr", admin}})
	pid := srv.cmd.Process.Pid
	if got := scrape.Value(t, metricsPage(t, admin), "fastlimit_grpc_connections_max"); got != wantCap {
		t.Fatalf("fastlimit_grpc_connections_max = %v under a limit of %d files, want %d", got, nofile, wantCap)
	}

	var flood []*rawh2.Conn
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	for range wantCap + extra {
		c, err := rawh2.Dial(srv.GRPC, 10*time.Second)
		if err != nil {
			continue // reset before the dial returned: refused
		}
		flood = append(flood, c)
	}
	wait.For(t, 30*time.Second, func() bool {
		m := metricsPage(t, admin)
		return scrape.Value(t, m, "fastlimit_grpc_connections") == wantCap &&
			scrape.Value(t, m, "fastlimit_grpc_connections_refused_total") >= extra
	})
	fds := openFDs(t, pid)
	t.Logf("at the cap: %d connections held, %d descriptors open of %d", wantCap, fds, nofile)
	if fds > nofile-32 {
		t.Errorf("%d descriptors open at the cap, of a limit of %d", fds, nofile)
	}
	for range 5 {
		if code := httpCode(srv.HTTP + "/healthcheck"); code != http.StatusOK {
			t.Fatalf("/healthcheck %d at the gRPC cap", code)
		}
	}
	_, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), domainRequest("bounds", "at-cap", "k"))
	if err != nil && status.Code(err) != codes.Unavailable {
		t.Fatalf("a new client at the cap: %v, want a decision or Unavailable", err)
	}
	t.Logf("a new client at the cap: %v", err)

	for _, c := range flood {
		_ = c.Close()
	}
	flood = nil
	wait.For(t, 30*time.Second, func() bool {
		_, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), domainRequest("bounds", "after", "k"))
		return err == nil
	})
	if n := scrape.Value(t, metricsPage(t, admin), "fastlimit_grpc_connections"); n > 2 {
		t.Errorf("%v gRPC connections open after the flood left", n)
	}
}

// streamsBounds are what 100,000 calls on one connection may cost the
// server beyond its idle baseline: --grpc-max-concurrent-streams (1000)
// handler goroutines and a margin, and memory. Measured on a 2-core box
// with the embedded store: +1,008 goroutines and +34 MB RSS at the peak
// (the issue saw +100,018 goroutines and +884 MB before the bounds).
const (
	streamsGoroutines = 1000 + 300
	streamsRSSKiB     = 150 << 10
)

// TestManyStreamsOneConnection opens 100,000 calls on one connection,
// each its headers only: 1,000 are admitted and the rest refused at once
// (ResourceExhausted), the admitted ones are dropped at
// --grpc-request-timeout, goroutines and RSS stay within streamsBounds,
// and a call whose request stops half-way is dropped at its deadline.
func TestManyStreamsOneConnection(t *testing.T) {
	const calls, timeout = 100_000, 3 * time.Second
	admin := loopback.Addr(t)
	srv := start(t, launch{rules: files.Dir(t, map[string]string{"b.yaml": boundsRules}),
		flags: []string{"--admin-addr", admin, "--grpc-request-timeout", timeout.String()}})
	pid := srv.cmd.Process.Pid
	if _, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), domainRequest("bounds", "warm", "k")); err != nil {
		t.Fatal(err)
	}
	baseG, baseRSS := scrape.Value(t, metricsPage(t, admin), "go_goroutines"), rssKiB(t, pid)

	half, err := rawh2.Dial(srv.GRPC, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	unfinished, err := half.Open(shouldRateLimit)
	if err != nil {
		t.Fatal(err)
	}
	if err := half.SendPart(unfinished, 4000, 100); err != nil {
		t.Fatal(err)
	}
	sentAt := time.Now()

	c, err := rawh2.Dial(srv.GRPC, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peakG, peakRSS := baseG, baseRSS
	sample := func() {
		peakG = max(peakG, scrape.Value(t, metricsPage(t, admin), "go_goroutines"))
		peakRSS = max(peakRSS, rssKiB(t, pid))
	}
	for i := range calls {
		if _, err := c.Open(shouldRateLimit); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i%10_000 == 0 {
			sample()
		}
	}
	wait.For(t, 60*time.Second, func() bool { sample(); return len(c.Ends()) == calls })
	// A call is refused by FastLimit's count (ResourceExhausted), or,
	// rarely, by gRPC's own check of the advertised limit while admitted
	// calls are still being closed (a reset), or admitted and dropped at
	// the timeout. Sending takes longer than the timeout on a loaded
	// machine, so more than 1000 may be admitted over the run: the
	// goroutine bound is what shows that no more than 1000 were at once.
	refused, reset, dropped, other := 0, 0, 0, 0
	for _, e := range c.Ends() {
		switch {
		case e.Status == int(codes.ResourceExhausted):
			refused++
		case e.Status == int(codes.DeadlineExceeded):
			dropped++
		case e.Status < 0:
			reset++
		default:
			other++
		}
	}
	m := metricsPage(t, admin)
	t.Logf("%d calls: %d refused, %d reset, %d dropped at the timeout; goroutines %v -> peak %v; RSS %d -> peak %d KiB",
		calls, refused, reset, dropped, baseG, peakG, baseRSS, peakRSS)
	if other != 0 || dropped == 0 || refused < calls/2 {
		t.Errorf("%d refused, %d reset, %d dropped, %d otherwise of %d calls without a request", refused, reset, dropped, other, calls)
	}
	if got := scrape.Value(t, m, "fastlimit_grpc_streams_refused_total"); got != float64(refused) {
		t.Errorf("fastlimit_grpc_streams_refused_total = %v, %d refusals seen", got, refused)
	}
	if peakG > baseG+streamsGoroutines {
		t.Errorf("goroutines peaked at %v from %v, want at most +%d", peakG, baseG, streamsGoroutines)
	}
	if peakRSS > baseRSS+streamsRSSKiB {
		t.Errorf("RSS peaked at %d KiB from %d, want at most +%d", peakRSS, baseRSS, streamsRSSKiB)
	}

	wait.For(t, 30*time.Second, func() bool { _, ok := half.Ends()[unfinished]; return ok })
	e := half.Ends()[unfinished]
	took := e.At.Sub(sentAt)
	t.Logf("the unfinished request ended (%v) %v after it was sent", e, took.Round(time.Millisecond))
	if e.Status != int(codes.DeadlineExceeded) && e.Status >= 0 {
		t.Errorf("the unfinished request ended with %v, want DeadlineExceeded or a reset", e)
	}
	if took < timeout-500*time.Millisecond {
		t.Errorf("the unfinished request was dropped after %v, before its %v deadline", took, timeout)
	}
	if got := scrape.Value(t, metricsPage(t, admin), "fastlimit_grpc_requests_timed_out_total"); got < float64(dropped+1) {
		t.Errorf("fastlimit_grpc_requests_timed_out_total = %v, want %d", got, dropped+1)
	}
	if _, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), domainRequest("bounds", "after", "k")); err != nil {
		t.Fatalf("after the attack: %v", err)
	}
}
