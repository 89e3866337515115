// Package server runs FastLimit: it builds the store, limiter, adapters
// and observers that the settings ask for, binds the gRPC, HTTP, admin
// and metrics listeners, keeps the rules current (files or xDS), answers
// health and readiness, and drains and stops in bounded steps.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/metrics"
	"github.com/fastlimit/fastlimit/pkg/refstats"
	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/settings"
	"github.com/fastlimit/fastlimit/pkg/tracing"
)

// Server owns the process's parts: rules, store, limiter, adapters and
// listeners. New starts nothing; Open starts serving and returns once the
// listeners are bound; Close stops everything, bounded in time.
type Server struct {
	opts    *settings.Settings
	version string
	log     *zap.Logger
	store   openStore
	limiter *limiter.Limiter
	service *rls.Service
	grpc    *grpc.Server
	health  *health.Server
	http    *http.Server

	registry *prometheus.Registry
	metrics  *metrics.Metrics
	rules    *ruleSource
	reload   *hotReload         // nil until Open, and with rules from xDS
	xds      *xdsRules          // nil unless rules come from xDS
	tracing  *tracing.Tracing   // nil with tracing off
	admin    *admin             // nil without --admin-addr
	ref      *refstats.Reporter // nil unless USE_PROMETHEUS, USE_STATSD or USE_DOG_STATSD
	timeouts httpTimeouts

	grpcLis, httpLis net.Listener
	draining         atomic.Bool
	serving          atomic.Bool     // Open got as far as serving: Close drains
	storeSeen        atomic.Bool     // the store has answered since the start
	life             context.Context // until Close
	cancel           context.CancelFunc
	stopProbe        context.CancelFunc // ends the gRPC health prober, if any
	wg               sync.WaitGroup
}

// New wires the server's parts from validated-on-the-way settings; reg
// receives its metrics; version is the build's, for logs, metrics and
// spans.
func New(o *settings.Settings, log *zap.Logger, reg *prometheus.Registry, version string) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	st, err := newStore(o, log)
	if err != nil {
		if o.RedisURL != "" {
			err = fmt.Errorf("%s: %w", o.Name("redis-url"), err)
		}
		return nil, err
	}
	s := &Server{opts: o, version: version, log: log, store: st, registry: reg, timeouts: defaultHTTPTimeouts}
	tlsOpts, err := grpcTLS(o.TLS, log.Named("tls"))
	if err != nil {
		return nil, err
	}
	to := o.Tracing
	to.Version = version
	if s.tracing, err = tracing.New(to, log.Named("tracing")); err != nil {
		return nil, err
	}
	s.limiter = limiter.New(s.tracing.Store(st, storeKind(o)), limiter.Options{KeyPrefix: o.KeyPrefix, Limits: &o.Limits, Atomic: o.Atomic})
	if err := s.newObservers(); err != nil {
		return nil, err
	}
	s.service = rls.New(s.limiter, rls.Options{
		Timeout:      storeWait(o),
		OnStoreError: o.OnStoreError,
		Headers:      o.Headers,
		Observer:     s.observer(),
		Traced:       s.tracing != nil,
	}, log.Named("service"))
	s.grpc = s.newGRPC(tlsOpts)
	return s, nil
}

// newObservers builds FastLimit's metrics, the reference's stats and the
// rules source that reports loads to both.
func (s *Server) newObservers() error {
	o := s.opts
	var err error
	if s.metrics, err = metrics.New(s.registry, metrics.Options{NearRatio: o.Admin.NearRatio, MaxDetailed: o.Admin.MaxDetailed}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := registerStoreMetrics(s.store, s.registry); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := metrics.RegisterBuildInfo(s.registry, s.version); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	ro := o.RefStats
	ro.NearRatio = o.Admin.NearRatio
	if s.ref, err = refstats.New(ro, s.limiter, s.registry, s.log.Named("refstats")); err != nil {
		return err
	}
	loads := loadObservers{s.metrics}
	if st := s.ref.Stats(); st != nil {
		loads = append(loads, st)
	}
	s.rules = newRuleSource(o.Rules(), s.limiter, loads, s.log.Named("rules"))
	return nil
}

// observer is what the RateLimitService adapter tells of each decision.
func (s *Server) observer() rls.Observer {
	if st := s.ref.Stats(); st != nil {
		return rls.Observers{s.metrics, st}
	}
	return s.metrics
}

// storeWait bounds a request's store call: --store-timeout, or none for
// the embedded store, which never waits.
func storeWait(o *settings.Settings) time.Duration {
	if o.RedisURL == "" {
		return 0
	}
	return o.StoreTimeout
}

// Open loads the rules, checks the store, binds the listeners and starts
// serving.
func (s *Server) Open(ctx context.Context) error {
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
	if err := s.listen(); err != nil {
		return err
	}
	if err := s.ref.Open(s.life); err != nil {
		return err
	}
	s.serve()
	s.setHealth(!s.opts.Health.ActiveConn || s.storeSeen.Load())
	if s.opts.Health.ActiveConn {
		s.probeHealth()
	}
	s.log.Info("serving", zap.String("grpc", s.grpcLis.Addr().String()), zap.String("http", s.httpLis.Addr().String()),
		zap.String("admin", s.AdminAddr()), zap.String("store", storeName(s.opts)), zap.String("version", s.version))
	return nil
}

// listen binds the gRPC, HTTP and admin listeners.
func (s *Server) listen() error {
	var err error
	if s.grpcLis, err = listen(s.opts.GRPCAddr); err != nil {
		return fmt.Errorf("listen grpc on %s (%s): %w", s.opts.GRPCAddr, s.opts.Name("grpc-addr"), err)
	}
	if s.httpLis, err = net.Listen("tcp", s.opts.HTTPAddr); err != nil {
		return fmt.Errorf("listen http on %s (%s): %w", s.opts.HTTPAddr, s.opts.Name("http-addr"), err)
	}
	s.http = newHTTPServer(s.httpHandler(), s.timeouts, s.timeouts.write)
	return s.openAdmin(s.adminHandler())
}

func (s *Server) serve() {
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
// admin listener down and closes the store. Each step is bounded, so
// Close returns within seconds whatever ctx says.
func (s *Server) Close(ctx context.Context) error {
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
	if s.opts.Drain > 0 && s.serving.Load() {
		time.Sleep(s.opts.Drain)
	}
	errs = append(errs, s.closeListeners(ctx)...)
	s.wg.Wait()
	if s.cancel != nil {
		s.cancel()
	}
	if err := s.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	return errors.Join(errs...)
}

// closeListeners stops gRPC, HTTP, the admin and metrics listeners and
// the span exporter, each within stepTimeout.
func (s *Server) closeListeners(ctx context.Context) []error {
	var errs []error
	if s.grpcLis != nil {
		stopGRPC(s.grpc, stepTimeout)
	}
	if s.httpLis != nil && s.http != nil {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		defer cancel()
		if err := s.http.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	if err := s.closeAdmin(ctx, stepTimeout); err != nil {
		errs = append(errs, err)
	}
	if err := s.ref.Close(ctx, stepTimeout); err != nil {
		errs = append(errs, err)
	}
	tctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := s.tracing.Shutdown(tctx); err != nil {
		errs = append(errs, fmt.Errorf("tracing shutdown: %w", err))
	}
	return errs
}

// stepTimeout bounds each step of Close.
const stepTimeout = 5 * time.Second

// GRPCAddr is the bound gRPC address, "" before Open.
func (s *Server) GRPCAddr() string {
	if s.grpcLis == nil {
		return ""
	}
	return s.grpcLis.Addr().String()
}

// HTTPAddr is the bound HTTP address, "" before Open.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}
