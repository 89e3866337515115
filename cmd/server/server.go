package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// server owns the process's parts: rules, store, limiter and listeners.
// newServer starts nothing; Open starts serving and returns once the
// listeners are bound; Close stops everything, bounded in time.
type server struct {
	opts    options
	log     *zap.Logger
	store   openStore
	limiter *limiter.Limiter
	service *service
	grpc    *grpc.Server
	health  *health.Server
	http    *http.Server

	registry *prometheus.Registry
	metrics  *metrics
	rules    *rules
	reload   *hotReload  // nil until Open, and with rules from xDS
	xds      *xdsRules   // nil unless rules come from xDS
	tracing  *tracing    // nil with tracing off
	admin    *admin      // nil without --admin-addr
	ref      *refMetrics // nil unless USE_PROMETHEUS, USE_STATSD or USE_DOG_STATSD

	grpcLis, httpLis net.Listener
	draining         atomic.Bool
	serving          atomic.Bool     // Open got as far as serving: Close drains
	storeSeen        atomic.Bool     // the store has answered since the start
	life             context.Context // until Close
	cancel           context.CancelFunc
	stopProbe        context.CancelFunc // ends the gRPC health prober, if any
	wg               sync.WaitGroup
}

// healthServices are the gRPC health service names FastLimit answers
// for: the server as a whole, and "ratelimit" as the reference names it.
var healthServices = []string{"", "ratelimit"}

// newServer wires the server's parts; reg receives its metrics.
func newServer(o options, log *zap.Logger, reg *prometheus.Registry) (*server, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	st, err := newStore(o, log)
	if err != nil {
		if o.redisURL != "" {
			err = fmt.Errorf("%s: %w", o.name("redis-url"), err)
		}
		return nil, err
	}
	s := &server{opts: o, log: log, store: st}
	tlsOpts, err := grpcTLS(o.tls, log.Named("tls"))
	if err != nil {
		return nil, err
	}
	if s.tracing, err = newTracing(o.tracing, log.Named("tracing")); err != nil {
		return nil, err
	}
	s.limiter = limiter.New(s.tracing.store(st, storeKind(o)), limiter.Options{KeyPrefix: o.keyPrefix, Limits: &o.limits, Atomic: o.atomic})
	s.registry = reg
	if s.metrics, err = newMetrics(s.registry, o.admin.nearRatio); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	s.metrics.detailed.max = o.admin.maxDetailed
	if err := registerStoreMetrics(st, s.registry); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := registerProcess(s.registry, Version); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if s.ref, err = newRefMetrics(o.refStats, s.limiter, o.admin.nearRatio, s.registry, log.Named("refstats")); err != nil {
		return nil, err
	}
	s.metrics.onLoad = s.ref.loadHook()
	s.rules = newRules(o.rules(), s.limiter, s.metrics, log.Named("rules"))
	// The embedded store never waits, so it needs no per-request timer.
	timeout := o.storeTimeout
	if o.redisURL == "" {
		timeout = 0
	}
	s.service = newService(s.limiter, timeout, s.ref.observer(s.metrics), o.headers, log.Named("service"))
	s.service.onError = o.onStoreError
	gopts := append(grpcOptions(o), tlsOpts...)
	gopts = append(gopts, s.tracing.grpcOptions()...)
	s.grpc = grpc.NewServer(append(gopts, s.ref.grpcOptions()...)...)
	rls.RegisterRateLimitServiceServer(s.grpc, s.service)
	s.health = health.NewServer()
	s.setHealth(false)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	// grpcurl and other tools list and call the services without .proto
	// files.
	reflection.Register(s.grpc)
	s.http = newHTTPServer(s.tracing.http(s.httpHandler()), o.admin.timeouts, o.admin.timeouts.write)
	return s, nil
}

// Open loads the rules, checks the store, binds the listeners and starts
// serving.
func (s *server) Open(ctx context.Context) error {
	if err := s.openRules(ctx); err != nil {
		return err
	}
	// The store lives until Close: the memory store's janitor runs on this
	// context. Redis' own dial and read timeouts bound this first check.
	s.life, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.store.Open(s.life); err != nil {
		// Not fatal: the store may come up later; requests get the
		// --on-store-error answer meanwhile and /ready says so.
		s.log.Warn("store does not answer yet", zap.Error(err))
	} else {
		s.storeSeen.Store(true)
	}
	if err := s.tracing.Open(s.life); err != nil {
		return err
	}
	var err error
	if s.grpcLis, err = listen(s.opts.grpcAddr); err != nil {
		return fmt.Errorf("listen grpc on %s (%s): %w", s.opts.grpcAddr, s.opts.name("grpc-addr"), err)
	}
	if s.httpLis, err = net.Listen("tcp", s.opts.httpAddr); err != nil {
		return fmt.Errorf("listen http on %s (%s): %w", s.opts.httpAddr, s.opts.name("http-addr"), err)
	}
	if err := s.openAdmin(s.adminHandler()); err != nil {
		return err
	}
	if err := s.ref.open(s.life); err != nil {
		return err
	}
	s.serve()
	s.setHealth(!s.opts.health.activeConn || s.storeSeen.Load())
	if s.opts.health.activeConn {
		s.probeHealth()
	}
	s.log.Info("serving", zap.String("grpc", s.grpcLis.Addr().String()), zap.String("http", s.httpLis.Addr().String()),
		zap.String("admin", s.adminAddr()), zap.String("store", storeName(s.opts)), zap.String("version", Version))
	return nil
}

func (s *server) serve() {
	s.serving.Store(true)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(s.grpcLis); err != nil {
			s.log.Error("grpc server stopped", zap.Error(err))
		}
	}()
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", zap.Error(err))
		}
	}()
}

// Close fails readiness, stops reloading, waits the drain period, stops
// gRPC gracefully (forcefully after a deadline), shuts HTTP and then the
// admin listener down and closes the store.
func (s *server) Close(ctx context.Context) error {
	s.draining.Store(true)
	if s.stopProbe != nil {
		s.stopProbe()
	}
	s.health.Shutdown()
	var errs []error
	if s.reload != nil {
		if err := s.reload.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop reload: %w", err))
		}
	}
	if s.xds != nil {
		s.xds.Close()
	}
	if s.opts.drain > 0 && s.serving.Load() {
		time.Sleep(s.opts.drain)
	}
	if s.grpcLis != nil {
		stopGRPC(s.grpc, 5*time.Second)
	}
	if s.httpLis != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := s.http.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	if err := s.closeAdmin(ctx, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := s.ref.close(ctx, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.tracing.Shutdown(tctx); err != nil {
		errs = append(errs, fmt.Errorf("tracing shutdown: %w", err))
	}
	s.wg.Wait()
	if s.cancel != nil {
		s.cancel()
	}
	if err := s.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	return errors.Join(errs...)
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

// grpcOptions tune the gRPC server for many small unary calls: stream
// workers reuse goroutines (and their grown stacks) instead of starting one
// per call, and connections share write buffers.
func grpcOptions(o options) []grpc.ServerOption {
	// Each connection keeps its own write buffer: grpc.SharedWriteBuffer
	// (returning it to a pool after every flush) cost 20-25 % of the rate
	// of the unlimited rule at 64 callers (BENCHMARKS.md), and Envoy holds
	// few connections.
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.maxRecvBytes),
		// Connections are closed after a day (with a random +-10 %),
		// so that Envoys spread over replicas added since they connected.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      o.grpcMaxAge,
			MaxConnectionAgeGrace: o.grpcMaxAgeGrace,
		}),
	}
	if o.streamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(o.streamWorkers)))
	}
	return opts
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

// setHealth sets the gRPC health of every service name.
func (s *server) setHealth(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range healthServices {
		s.health.SetServingStatus(name, st)
	}
}

// probeInterval is how often gRPC health follows the store with
// --redis-health-check-active-connection.
const probeInterval = time.Second

// probeHealth keeps gRPC health in step with /healthcheck while the
// store's answers decide it, until Close.
func (s *server) probeHealth() {
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
