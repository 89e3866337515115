package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/bench/load"
)

// fakeService answers OVER_LIMIT for values ending in "7", fails values
// ending in "3", and records every value it sees.
type fakeService struct {
	rls.UnimplementedRateLimitServiceServer
	mu     sync.Mutex
	seen   map[string]int
	domain string
	keys   map[string]bool
	descs  int
}

func (f *fakeService) ShouldRateLimit(_ context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.domain = req.GetDomain()
	f.descs = len(req.GetDescriptors())
	code := rls.RateLimitResponse_OK
	for _, d := range req.GetDescriptors() {
		e := d.GetEntries()[0]
		f.seen[e.GetValue()]++
		f.keys[e.GetKey()] = true
		switch {
		case strings.HasSuffix(e.GetValue(), "3"):
			return nil, status.Error(codes.Unavailable, "store down")
		case strings.HasSuffix(e.GetValue(), "7"):
			code = rls.RateLimitResponse_OVER_LIMIT
		}
	}
	return &rls.RateLimitResponse{OverallCode: code}, nil
}

func startFake(t *testing.T) (string, *fakeService) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeService{seen: map[string]int{}, keys: map[string]bool{}}
	g := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), f
}

func runJSON(t *testing.T, args ...string) *load.Report {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(append(args, "-json"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var r load.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return &r
}

func TestSequentialRunCoversTheKeyspaceOnce(t *testing.T) {
	addr, f := startFake(t)
	r := runJSON(t, "-addr", addr, "-c", "8", "-conns", "3", "-pick", "seq", "-keys", "1000",
		"-offset", "5000", "-n", "1000", "-warmup", "0", "-d", "30s", "-domain", "d", "-key", "k")
	if r.Requests != 1000 || r.OK+r.Over+r.Errors != 1000 {
		t.Fatalf("requests %d = OK %d + OVER %d + errors %d, want 1000", r.Requests, r.OK, r.Over, r.Errors)
	}
	if len(f.seen) != 1000 {
		t.Fatalf("%d distinct values, want 1000", len(f.seen))
	}
	for v, n := range f.seen {
		if n != 1 {
			t.Fatalf("value %s sent %d times", v, n)
		}
	}
	if f.seen["user-5000"] != 1 || f.seen["user-5999"] != 1 {
		t.Fatal("values do not span offset .. offset+keys-1")
	}
	// Values ending in 7 are over, in 3 fail: 100 of each in 1000.
	if r.Over != 100 || r.Errors != 100 || r.ErrorCodes["Unavailable"] != 100 {
		t.Fatalf("OVER %d, errors %d (%v), want 100 and 100 Unavailable", r.Over, r.Errors, r.ErrorCodes)
	}
	if r.Latency.P50 <= 0 || r.Latency.P99 < r.Latency.P50 || r.Latency.Max < r.Latency.P99 {
		t.Fatalf("latency not ordered: %+v", r.Latency)
	}
	if f.domain != "d" || !f.keys["k"] {
		t.Fatalf("domain %q keys %v", f.domain, f.keys)
	}
}

func TestUniformRunStopsOnTime(t *testing.T) {
	addr, f := startFake(t)
	start := time.Now()
	r := runJSON(t, "-addr", addr, "-c", "4", "-d", "300ms", "-warmup", "100ms", "-keys", "10",
		"-descriptors", "3", "-key", "a,b")
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("run took %v for 400ms of load", took)
	}
	if r.Seconds < 0.3 || r.Seconds > 1 || r.DecisionsPerSec <= 0 {
		t.Fatalf("measured %.2fs at %.0f/s", r.Seconds, r.DecisionsPerSec)
	}
	if r.DescriptorsPerSec != 3*r.DecisionsPerSec {
		t.Fatalf("descriptors/s %.0f, want 3 x %.0f", r.DescriptorsPerSec, r.DecisionsPerSec)
	}
	if len(f.seen) > 10 || f.descs != 3 || !f.keys["a"] || !f.keys["b"] {
		t.Fatalf("%d distinct values (want <= 10), %d descriptors, keys %v", len(f.seen), f.descs, f.keys)
	}
}

func TestOpenLoopRun(t *testing.T) {
	addr, _ := startFake(t)
	r := runJSON(t, "-addr", addr, "-rate", "500", "-c", "0", "-d", "400ms", "-warmup", "0", "-keys", "10")
	if r.Open == nil || r.Open.Rate != 500 || r.Open.Arrivals < 100 || r.Requests != r.Open.Arrivals {
		t.Fatalf("open loop %+v, %d requests: want about 200 arrivals at 500/s, each sent", r.Open, r.Requests)
	}
}

func TestBadFlagsAndUnreachableServer(t *testing.T) {
	for _, args := range [][]string{{"-c", "0"}, {"-rate", "-1"}, {"-d", "0"}, {"-pick", "zipf"}, {"-key", ","}, {"extra"}} {
		if code := run(args, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	var errOut bytes.Buffer
	if code := run([]string{"-addr", addr, "-d", "1s"}, &bytes.Buffer{}, &errOut); code != 1 {
		t.Fatalf("unreachable server: exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "connect to") {
		t.Fatalf("stderr %q does not say it could not connect", errOut.String())
	}
}
