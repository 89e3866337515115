package server

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// bigClient is a gRPC client that sends and receives up to 64 MiB.
func bigClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// report is a usage report of about size bytes (buckets of a domain
// without rules: allowed).
func report(size int) *rlqspb.RateLimitQuotaUsageReports {
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "adm"}
	for i := 0; i*100 < size; i++ {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:    &rlqspb.BucketId{Bucket: map[string]string{"nope": strings.Repeat("x", 80) + string(rune('a'+i%26)) + strings.Repeat("y", i%7) + itoa(i)}},
			TimeElapsed: durationpb.New(time.Second)})
	}
	return r
}

func itoa(i int) string {
	b := []byte{}
	for ; i > 0 || len(b) == 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// reportCode sends a report on a new stream and returns the code the
// stream's first answer ends with (OK if answered).
func reportCode(t *testing.T, conn *grpc.ClientConn, r *rlqspb.RateLimitQuotaUsageReports) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	s, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// io.EOF: the server ended the stream first; Recv says how.
	if err := s.Send(r); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = s.Recv()
	return status.Code(err)
}

// TestRLQSSizes: RateLimitService requests are bounded by
// --max-request-bytes and RLQS reports by --rlqs-max-report-bytes, on the
// one gRPC server, whichever is larger; without --rlqs there is no RLQS.
func TestRLQSSizes(t *testing.T) {
	big := func(size int) *rlspb.RateLimitRequest {
		return rlsRequest("adm", "win", strings.Repeat("v", size))
	}
	for _, tc := range []struct {
		name      string
		args      []string
		rls       int // request bytes
		rlsCode   codes.Code
		rlqs      int
		rlqsCode  codes.Code
		refusedIn string // the series that counts the refused report
	}{
		{"defaults: RLS 4 MiB, RLQS 16 MiB", []string{"--rlqs"}, 5 << 20, codes.ResourceExhausted, 5 << 20, codes.OK, ""},
		{"RLQS above its limit", []string{"--rlqs"}, 1 << 10, codes.OK, 17 << 20, codes.ResourceExhausted, "fastlimit_rlqs_refused_reports_total"},
		{"RLS limit the larger", []string{"--rlqs", "--max-request-bytes", "8388608", "--rlqs-max-report-bytes", "2097152"},
			5 << 20, codes.OK, 3 << 20, codes.ResourceExhausted, "fastlimit_rlqs_refused_reports_total"},
		{"no RLQS", nil, 5 << 20, codes.ResourceExhausted, 1 << 10, codes.Unimplemented, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, tc.args...)
			conn := bigClient(t, s.GRPCAddr())
			_, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), big(tc.rls))
			if code := status.Code(err); code != tc.rlsCode {
				t.Errorf("RLS request of %d bytes: %v, want %v", tc.rls, err, tc.rlsCode)
			}
			if code := reportCode(t, conn, report(tc.rlqs)); code != tc.rlqsCode {
				t.Errorf("RLQS report of %d bytes: %v, want %v", tc.rlqs, code, tc.rlqsCode)
			}
			if tc.refusedIn != "" && !wait.True(patience, func() bool {
				return metricValue(t, s.registry, tc.refusedIn) == 1
			}) {
				t.Errorf("%s = %v, want 1", tc.refusedIn, metricValue(t, s.registry, tc.refusedIn))
			}
		})
	}
}

// TestRLQSKeepalive: with --rlqs, the server pings a silent connection
// and closes it when the ping goes unanswered.
func TestRLQSKeepalive(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules},
		"--rlqs", "--rlqs-keepalive-time", "1s", "--rlqs-keepalive-timeout", "1s")
	c := rawConn(t, s.GRPCAddr())
	if _, err := c.Open("/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"); err != nil {
		t.Fatal(err)
	}
	if !wait.True(patience, func() bool { closed, _ := c.Closed(); return closed }) {
		t.Error("a connection that answers no ping is still open")
	}
}

// TestRLQSAddr: with --rlqs-addr, RLQS is served on its own listener, in
// this process, and RateLimitService on --grpc-addr alone: each listener
// answers the other's service Unimplemented. Its report limit holds there.
func TestRLQSAddr(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--rlqs", "--rlqs-addr", "127.0.0.1:0")
	if s.RLQSAddr() == "" || s.RLQSAddr() == s.GRPCAddr() {
		t.Fatalf("RLQS at %q, gRPC at %q", s.RLQSAddr(), s.GRPCAddr())
	}
	main, own := bigClient(t, s.GRPCAddr()), bigClient(t, s.RLQSAddr())
	if code := reportCode(t, own, report(1<<10)); code != codes.OK {
		t.Errorf("RLQS on --rlqs-addr: %v, want OK", code)
	}
	if code := reportCode(t, own, report(17<<20)); code != codes.ResourceExhausted {
		t.Errorf("a report above --rlqs-max-report-bytes on --rlqs-addr: %v, want ResourceExhausted", code)
	}
	if code := reportCode(t, main, report(1<<10)); code != codes.Unimplemented {
		t.Errorf("RLQS on --grpc-addr: %v, want Unimplemented", code)
	}
	req := rlsRequest("adm", "win", "v")
	if _, err := rlspb.NewRateLimitServiceClient(main).ShouldRateLimit(t.Context(), req); err != nil {
		t.Errorf("RLS on --grpc-addr: %v", err)
	}
	// RateLimitService's server alone keeps --max-request-bytes (4 MiB).
	big := rlsRequest("adm", "win", strings.Repeat("v", 5<<20))
	if _, err := rlspb.NewRateLimitServiceClient(main).ShouldRateLimit(t.Context(), big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("an RLS request of 5 MiB on --grpc-addr: %v, want ResourceExhausted", err)
	}
	if _, err := rlspb.NewRateLimitServiceClient(own).ShouldRateLimit(t.Context(), req); status.Code(err) != codes.Unimplemented {
		t.Errorf("RLS on --rlqs-addr: %v, want Unimplemented", err)
	}
}

// TestRLQSProcessOpenFails: with --rlqs-process, an Open that fails after
// binding the child's listeners (here the admin address is taken) starts
// no child, and Close returns, the listeners freed.
func TestRLQSProcessOpenFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	rlqsAddr := freeAddr(t)
	s := newServer(t, zaptest.NewLogger(t), loopbackArgs(files.Dir(t, map[string]string{"adm.yaml": adminRules}),
		"--rlqs", "--rlqs-addr", rlqsAddr, "--rlqs-process", "--admin-addr", taken.Addr().String())...)
	if err := s.Open(context.Background()); err == nil {
		t.Fatal("Open with the admin address taken succeeded")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case <-closed:
	case <-time.After(patience):
		t.Fatal("Close did not return")
	}
	if s.child.sup.PID() != 0 {
		t.Errorf("a child was started: %d", s.child.sup.PID())
	}
	l, err := net.Listen("tcp", rlqsAddr)
	if err != nil {
		t.Fatalf("--rlqs-addr still bound after Close: %v", err)
	}
	_ = l.Close()
}

// freeAddr is a loopback address free when asked.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
