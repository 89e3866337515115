package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fastlimit/fastlimit/config"
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

	grpcLis, httpLis net.Listener
	draining         atomic.Bool
	life             context.Context // until Close
	cancel           context.CancelFunc
	wg               sync.WaitGroup
}

func newServer(o options, log *zap.Logger) (*server, error) {
	if err := o.headers.validate(); err != nil {
		return nil, err
	}
	st, err := newStore(o, log)
	if err != nil {
		return nil, err
	}
	s := &server{opts: o, log: log, store: st}
	s.limiter = limiter.New(st, limiter.Options{KeyPrefix: o.keyPrefix})
	s.service = newService(s.limiter, o.storeTimeout, nil, o.headers, log.Named("service"))
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(o.maxRecvBytes))
	rls.RegisterRateLimitServiceServer(s.grpc, s.service)
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// Open loads the rules, checks the store, binds the listeners and starts
// serving.
func (s *server) Open(ctx context.Context) error {
	rules, err := config.Load(s.opts.configDir)
	if err != nil {
		return fmt.Errorf("load rules from %s: %w", s.opts.configDir, err)
	}
	s.limiter.SetRules(rules.Set)
	s.log.Info("rules loaded", zap.String("dir", s.opts.configDir), zap.Int("files", len(rules.Files)),
		zap.Int("domains", len(rules.Set.Domains())), zap.String("hash", rules.Hash))
	// The store lives until Close: the memory store's janitor runs on this
	// context. Redis' own dial and read timeouts bound this first check.
	s.life, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.store.Open(s.life); err != nil {
		// Not fatal: the store may come up later; requests answer
		// Unavailable meanwhile and /healthcheck says so.
		s.log.Warn("store does not answer yet", zap.Error(err))
	}
	if s.grpcLis, err = net.Listen("tcp", s.opts.grpcAddr); err != nil {
		return fmt.Errorf("listen grpc: %w", err)
	}
	if s.httpLis, err = net.Listen("tcp", s.opts.httpAddr); err != nil {
		return fmt.Errorf("listen http: %w", err)
	}
	s.serve()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("serving", zap.String("grpc", s.grpcLis.Addr().String()), zap.String("http", s.httpLis.Addr().String()),
		zap.String("store", storeName(s.opts)), zap.String("version", Version))
	return nil
}

func (s *server) serve() {
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

// Close fails readiness, waits the drain period, stops gRPC gracefully
// (forcefully after a deadline), shuts HTTP down and closes the store.
func (s *server) Close(ctx context.Context) error {
	s.draining.Store(true)
	s.health.Shutdown()
	if s.opts.drain > 0 && s.grpcLis != nil {
		time.Sleep(s.opts.drain)
	}
	if s.grpcLis != nil {
		stopGRPC(s.grpc, 5*time.Second)
	}
	var errs []error
	if s.httpLis != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := s.http.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
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
