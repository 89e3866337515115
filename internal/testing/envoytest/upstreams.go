package envoytest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// GRPCUpstream is a plaintext gRPC server (HTTP/2 without TLS) for Envoy
// to route gRPC calls to: it serves grpc.health.v1, every service
// SERVING, so that a test calls Health/Check through Envoy.
type GRPCUpstream struct {
	// Addr is its loopback address.
	Addr  string
	calls atomic.Int64
}

// StartGRPCUpstream serves gRPC health on a free loopback port until t
// ends. Envoy's cluster for it needs http2_protocol_options.
func StartGRPCUpstream(t testing.TB) *GRPCUpstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &GRPCUpstream{Addr: l.Addr().String()}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		u.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return u
}

// Calls returns the number of calls the upstream has served.
func (u *GRPCUpstream) Calls() int64 { return u.calls.Load() }

// TCPUpstream is a TCP echo server for Envoy's tcp_proxy: it writes back
// whatever a connection sends, and counts the connections it accepted.
type TCPUpstream struct {
	// Addr is its loopback address.
	Addr     string
	accepted atomic.Int64
}

// StartTCPUpstream echoes on a free loopback port until t ends.
func StartTCPUpstream(t testing.TB) *TCPUpstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &TCPUpstream{Addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("tcp upstream: %v", err)
				}
				return
			}
			u.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c); _ = c.Close() })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return u
}

// Accepted returns the number of connections the upstream has accepted.
func (u *TCPUpstream) Accepted() int64 { return u.accepted.Load() }
