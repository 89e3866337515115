package server

import (
	"context"
	"net"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fastlimit/fastlimit/internal/testing/rawh2"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/rls"
)

// patience bounds the waits of the bounds tests for what must happen.
const patience = 15 * time.Second

func rawConn(t *testing.T, addr string) *rawh2.Conn {
	t.Helper()
	c, err := rawh2.Dial(addr, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func grpcClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestStreamsPerConnection opens ten calls that never send their request
// on one connection with --grpc-max-concurrent-streams 3: seven are
// refused at once (ResourceExhausted, counted), the three admitted are
// dropped at --grpc-request-timeout (counted), and the connection then
// serves again.
func TestStreamsPerConnection(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules},
		"--grpc-max-concurrent-streams", "3", "--grpc-request-timeout", "300ms")
	c := rawConn(t, s.GRPCAddr())
	var ids []uint32
	for range 10 {
		id, err := c.Open(rls.ShouldRateLimitMethod)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	wait.For(t, patience, func() bool { return len(c.Ends()) == len(ids) })
	refused, dropped := 0, 0
	for id, e := range c.Ends() {
		switch {
		case e.Status == int(codes.ResourceExhausted):
			refused++
		case e.Status == int(codes.DeadlineExceeded) || e.Status < 0:
			dropped++
		default:
			t.Errorf("stream %d ended with %v", id, e)
		}
	}
	if refused != 7 || dropped != 3 {
		t.Fatalf("%d refused and %d dropped, want 7 and 3", refused, dropped)
	}
	wait.For(t, patience, func() bool { return gathered(t, s, "fastlimit_grpc_requests_timed_out_total") == 3 })
	if got := gathered(t, s, "fastlimit_grpc_streams_refused_total"); got != 7 {
		t.Errorf("fastlimit_grpc_streams_refused_total = %v, want 7", got)
	}

	// The calls dropped, three may be in flight again.
	again, err := c.Open(rls.ShouldRateLimitMethod)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, patience, func() bool { _, ok := c.Ends()[again]; return ok })
	if e := c.Ends()[again]; e.Status == int(codes.ResourceExhausted) {
		t.Fatalf("a call after the others ended was refused: %v", e)
	}
}

// TestUnfinishedRequestDropped sends a call's headers and part of its
// request, never the rest: the call is dropped at --grpc-request-timeout.
func TestUnfinishedRequestDropped(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--grpc-request-timeout", "500ms")
	c := rawConn(t, s.GRPCAddr())
	id, err := c.Open(rls.ShouldRateLimitMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendPart(id, 4000, 100); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	wait.For(t, patience, func() bool { _, ok := c.Ends()[id]; return ok })
	e := c.Ends()[id]
	if e.Status != int(codes.DeadlineExceeded) && e.Status >= 0 {
		t.Fatalf("the unfinished call ended with %v, want DeadlineExceeded or a reset", e)
	}
	if took := e.At.Sub(sent); took < 400*time.Millisecond {
		t.Fatalf("dropped after %v, before the 500ms timeout", took)
	}
	wait.For(t, patience, func() bool { return gathered(t, s, "fastlimit_grpc_requests_timed_out_total") == 1 })
}

// TestServerStreamsOutliveRequestTimeout: health's Watch, a server
// stream, is not cut at --grpc-request-timeout.
func TestServerStreamsOutliveRequestTimeout(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--grpc-request-timeout", "200ms")
	w, err := healthpb.NewHealthClient(grpcClient(t, s.GRPCAddr())).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { _, err := w.Recv(); ended <- err }()
	select {
	case err := <-ended:
		t.Fatalf("Watch ended with %v: cut by the request timeout", err)
	case <-time.After(5 * 200 * time.Millisecond):
	}
}

// TestConnectionCap holds --grpc-max-connections connections: the next
// is closed at once and counted, /healthcheck answers, and once they
// close a client decides again.
func TestConnectionCap(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--grpc-max-connections", "3")
	var held []*rawh2.Conn
	for range 3 {
		held = append(held, rawConn(t, s.GRPCAddr()))
	}
	wait.For(t, patience, func() bool { return gathered(t, s, "fastlimit_grpc_connections") == 3 })
	extra, err := net.DialTimeout("tcp", s.GRPCAddr(), patience)
	if err == nil {
		_ = extra.SetReadDeadline(time.Now().Add(patience))
		_, rerr := extra.Read(make([]byte, 1))
		_ = extra.Close()
		if ne, ok := rerr.(net.Error); ok && ne.Timeout() {
			t.Fatal("a connection past the cap was held")
		}
	}
	wait.For(t, patience, func() bool { return gathered(t, s, "fastlimit_grpc_connections_refused_total") == 1 })
	if code, _ := scrape.Get(t, "http://"+s.HTTPAddr()+"/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck %d at the gRPC cap", code)
	}
	for _, c := range held {
		_ = c.Close()
	}
	client := rlspb.NewRateLimitServiceClient(grpcClient(t, s.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := client.ShouldRateLimit(ctx, rlsRequest("adm", "win", "x"), grpc.WaitForReady(true)); err != nil {
		t.Fatalf("after the held connections closed: %v", err)
	}
}

// TestIdleConnectionClosed: a connection without a call is closed after
// --grpc-max-connection-idle, and counted.
func TestIdleConnectionClosed(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--grpc-max-connection-idle", "300ms")
	c := rawConn(t, s.GRPCAddr())
	wait.For(t, patience, func() bool { closed, _ := c.Closed(); return closed })
	wait.For(t, patience, func() bool { return gathered(t, s, "fastlimit_grpc_idle_connections_closed_total") == 1 })
}
