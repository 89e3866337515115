package server

import (
	"context"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/pkg/rls"
)

// healthServices are the gRPC health service names FastLimit answers
// for: the server as a whole, and "ratelimit" as the reference names it.
var healthServices = []string{"", "ratelimit"}

// newGRPC builds the gRPC server: RateLimitService, health (not serving
// until Open) and reflection, with TLS, tracing and the reference's
// call stats as the settings ask.
func (s *Server) newGRPC(tlsOpts []grpc.ServerOption, withRLS, withRLQS bool) *grpc.Server {
	gopts := append(grpcOptions(s, withRLQS && s.rlqs != nil), tlsOpts...)
	gopts = append(gopts, s.bounds.options()...)
	gopts = append(gopts, s.tracing.ServerOptions(rls.ShouldRateLimitMethod)...)
	g := grpc.NewServer(append(gopts, s.ref.ServerOptions()...)...)
	if withRLS {
		s.service.Register(g)
	}
	if withRLQS && s.rlqs != nil {
		s.rlqs.Register(g)
	}
	if s.health == nil {
		s.health = health.NewServer()
		s.setHealth(false)
	}
	healthpb.RegisterHealthServer(g, s.health)
	// grpcurl and other tools list and call the services without .proto
	// files.
	reflection.Register(g)
	s.bounds.setMethods(g)
	return g
}

// newGRPCServers builds the gRPC servers: one for both services, or,
// with --rlqs-addr, RateLimitService's and RLQS's apart; in
// --rlqs-process's parent, RateLimitService's alone (its child serves
// RLQS), and in the child RLQS's alone.
func (s *Server) newGRPCServers(tlsOpts []grpc.ServerOption) {
	switch {
	case s.opts.RLQS.Child:
		s.rlqsGRPC = s.newGRPC(tlsOpts, false, true)
	case s.rlqsSplit():
		s.grpc = s.newGRPC(tlsOpts, true, false)
		if !s.inParent() {
			s.rlqsGRPC = s.newGRPC(tlsOpts, false, true)
		}
	default:
		s.grpc = s.newGRPC(tlsOpts, true, true)
	}
}

// serveGRPC serves g on lis until Close; nothing without either.
func (s *Server) serveGRPC(g *grpc.Server, lis net.Listener) {
	if g == nil || lis == nil {
		return
	}
	s.wg.Go(func() {
		if err := g.Serve(lis); err != nil {
			s.log.Error("grpc server stopped", zap.Error(err))
		}
	})
}

// grpcOptions tune the gRPC server for many small unary calls: stream
// workers reuse goroutines (and their grown stacks) instead of starting one
// per call. A server that carries RLQS (withRLQS) pings silent connections
// and receives RLQS's larger reports, bounding RateLimitService's
// requests itself; one without (RateLimitService alone, with --rlqs-addr)
// keeps gRPC's own receive limit and no interceptor on its calls.
func grpcOptions(s *Server, withRLQS bool) []grpc.ServerOption {
	o := s.opts
	// Each connection keeps its own write buffer: grpc.SharedWriteBuffer
	// returns it to a pool after every flush, which costs more than Envoy's
	// few connections save (BENCHMARKS.md).
	ka := keepalive.ServerParameters{
		MaxConnectionAge:      o.GRPCMaxConnectionAge,
		MaxConnectionAgeGrace: o.GRPCMaxConnectionAgeGrace,
		// 0 is gRPC's default: never.
		MaxConnectionIdle: o.GRPC.MaxConnectionIdle,
	}
	if withRLQS {
		// gRPC pings per server: with RLQS, a connection silent this long
		// (no Envoy's, which reports every 5 s) is pinged, and closed
		// unanswered (docs/rlqs.md, "Keepalive").
		ka.Time, ka.Timeout = o.RLQS.KeepaliveTime, o.RLQS.KeepaliveTimeout
	}
	recv := o.MaxRequestBytes
	if withRLQS {
		recv = o.RLQS.RecvBytes(o.MaxRequestBytes)
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(recv),
		// Descriptor values that are not UTF-8 are decided, not refused.
		rls.ServerOption(),
		// Connections are closed after a day (with a random +-10 %),
		// so that Envoys spread over replicas added since they connected.
		grpc.KeepaliveParams(ka),
	}
	if recv > o.MaxRequestBytes {
		opts = append(opts, grpc.ChainUnaryInterceptor(requestBound(o.MaxRequestBytes)))
	}
	if o.GRPCStreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(o.GRPCStreamWorkers)))
	}
	return opts
}

// requestBound refuses a unary request larger than limit, as gRPC's own
// receive limit would, where the server's limit is the larger one of RLQS
// reports.
func requestBound(limit int) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if m, ok := req.(proto.Message); ok {
			if n := proto.Size(m); n > limit {
				return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, limit)
			}
		}
		return handler(ctx, req)
	}
}

// listen binds addr: host:port over TCP, or "unix:PATH" (also
// "unix://PATH") on a unix socket, as GRPC_UDS asks.
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		return net.Listen("unix", path)
	}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// stopGRPC stops gracefully, then forcefully after timeout.
func stopGRPC(g *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		g.Stop()
		<-done
	}
}

// setHealth sets the gRPC health of every service name.
func (s *Server) setHealth(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range healthServices {
		s.health.SetServingStatus(name, st)
	}
}

// probeInterval is how often gRPC health follows the store with
// --health-requires-redis.
const probeInterval = time.Second

// probeHealth keeps gRPC health in step with /healthcheck while the
// store's answers decide it, until Close.
func (s *Server) probeHealth() {
	ctx, cancel := context.WithCancel(s.life)
	s.stopProbe = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(probeInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.setHealth(s.healthy(ctx) == nil)
			}
		}
	}()
}
