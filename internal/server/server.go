// Package server runs FastLimit: it builds the store, limiter, adapters
// and observers that the settings ask for, binds the gRPC, HTTP, admin
// and metrics listeners, keeps the rules current (files or xDS), answers
// health and readiness, and drains and stops in bounded steps.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/edge/certs"
	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
	"github.com/fastlimit/fastlimit/internal/edge/httpserver"
	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/observe/tracing"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/internal/source/xds"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rls"
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
	rlqs    *rlqs.Service // nil with --rlqs=false
	// rlqsRedis is the RLQS demand exchanges' own client (nil without Redis).
	rlqsRedis io.Closer
	grpc      *grpc.Server // nil in --rlqs-process's child
	// rlqsGRPC serves RLQS alone on rlqsLis, its own listener
	// (--rlqs-addr), in this process or in --rlqs-process's child.
	rlqsGRPC *grpc.Server
	rlqsLis  net.Listener
	child    *rlqsChild // --rlqs-process's parent side
	bounds   *grpcBounds
	health   *health.Server
	http     *httpserver.Server
	certs    *certs.Reloader // nil without gRPC TLS

	registry *prometheus.Registry
	metrics  *metrics.Metrics
	rules    *ruleSource
	reload   *hotReload         // nil until Open, and with rules from xDS
	xds      *xdsRules          // nil unless rules come from xDS
	xdsSrc   *xdsSource         // compiles xDS snapshots with the rules overlay
	tracing  *tracing.Tracing   // nil with tracing off
	admin    *httpserver.Server // nil without --admin-addr
	adminAPI *admin.API
	// metricsSrv serves --metrics-addr, nil without it.
	metricsSrv *httpserver.Server
	ref        *refstats.Reporter // nil unless USE_PROMETHEUS, USE_STATSD or USE_DOG_STATSD
	top        *top.Tracker       // nil with --top-keys 0
	stopTop    func()             // ends the top tracker's Run
	failures   *failureLog        // logs store failures
	// adminCerts serves the admin listener's TLS, nil without --admin-tls-cert.
	adminCerts *certs.Reloader
	// httpOpts and adminOpts bound the HTTP and admin listeners.
	httpOpts, adminOpts httpserver.Options
	tlsRefused          *prometheus.CounterVec // certificates refused on rotation, by use

	grpcLis   *connlimit.Listener
	files     int // the open-files limit; 0 when unknown
	draining  atomic.Bool
	serving   atomic.Bool     // Open got as far as serving: Close drains
	storeSeen atomic.Bool     // the store has answered since the start
	life      context.Context // until Close
	cancel    context.CancelFunc
	stopProbe context.CancelFunc // ends the gRPC health prober, if any
	wg        sync.WaitGroup
	// clock times the rules watcher and the xDS client that Open starts
	// (nil: the wall clock); in-package tests set a fake one after New.
	clock openClock
}

// openClock is the time of the parts Open starts.
type openClock interface {
	reload.Clock
	xds.Clock
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
		if o.Redis.Client.URL != "" {
			err = fmt.Errorf("%s: %w", o.Name("redis-url"), err)
		}
		return nil, err
	}
	s := &Server{opts: o, version: version, log: log, store: st, registry: reg,
		httpOpts: httpserver.Defaults, adminOpts: adminHTTP}
	if s.files, err = connlimit.OpenFilesLimit(); err != nil {
		log.Warn("the open-files limit is unknown; --grpc-max-connections alone caps gRPC connections", zap.Error(err))
	}
	// Each HTTP listener is capped, so that the gRPC one at its cap
	// leaves them descriptors.
	s.httpOpts.MaxConns = httpConnCap(s.files)
	s.adminOpts.MaxConns = s.httpOpts.MaxConns
	if s.tlsRefused, err = metrics.NewTLS(reg); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var tlsOpts []grpc.ServerOption
	if s.certs, tlsOpts, err = grpcTLS(o.GRPCTLS, s.tlsRefused.WithLabelValues(metrics.TLSGRPCServer).Inc, log.Named("tls")); err != nil {
		return nil, err
	}
	to := o.Tracing
	to.Version = version
	if s.tracing, err = tracing.New(to, log.Named("tracing")); err != nil {
		return nil, err
	}
	limits := o.Limits
	s.limiter = limiter.New(s.tracing.Store(st, storeKind(o)), limiter.Options{KeyPrefix: o.KeyPrefix, Limits: &limits, AllOrNothing: o.Atomic,
		QuotaMode: o.QuotaMode})
	if err := s.newObservers(); err != nil {
		return nil, err
	}
	onStoreError, err := limiter.ParseFailurePolicy(o.OnStoreError)
	if err != nil {
		return nil, o.Named(settings.Bad("on-store-error", "%w", err))
	}
	s.service = rls.New(s.limiter, rls.Options{
		Timeout:      storeWait(o),
		OnStoreError: onStoreError,
		ShadowMode:   o.ShadowMode,
		Headers:      o.Headers,
		Observer:     s.observer(),
		Spans:        spans(s.tracing),
	}, log.Named("service"))
	if err := s.newRLQS(redisOf(st)); err != nil {
		return nil, err
	}
	if err := s.newAdmin(); err != nil {
		return nil, o.Named(err)
	}
	s.newGRPCServers(tlsOpts)
	return s, nil
}

// storeWait bounds a request's store call: --store-timeout, or none for
// the embedded store, which never waits.
func storeWait(o *settings.Settings) time.Duration {
	if o.Redis.Client.URL == "" {
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
	if s.opts.RLQS.Child {
		return s.openChild(ctx)
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
	if s.certs != nil {
		if err := s.certs.Open(s.life); err != nil {
			return err
		}
	}
	if err := s.ref.Open(s.life); err != nil {
		return err
	}
	if err := s.openOps(); err != nil {
		return err
	}
	s.serve()
	if err := s.startChild(); err != nil {
		return err
	}
	s.setHealth(!s.opts.Health.RequiresRedis || s.storeSeen.Load())
	if s.opts.Health.RequiresRedis {
		s.probeHealth()
	}
	s.log.Info("serving", zap.String("grpc", s.grpcLis.Addr().String()), zap.String("http", s.HTTPAddr()),
		zap.String("admin", s.AdminAddr()), zap.String("metrics", s.MetricsAddr()), zap.String("rlqs", s.RLQSAddr()), zap.String("store", storeName(s.opts)), zap.String("version", s.version),
		zap.Int64("grpc_max_connections", s.grpcLis.Stats().Max))
	return nil
}

// listen binds the gRPC, HTTP and admin listeners, each capped so that
// the gRPC listener at its cap leaves descriptors to the others.
func (s *Server) listen() error {
	// HTTP, admin and the reference's Prometheus listeners, and
	// --metrics-addr's.
	listeners := 3
	if !s.opts.Admin.MetricsOff() {
		listeners++
	}
	grpcCap, err := grpcConnCap(s.opts, s.files, listeners*s.httpOpts.MaxConns)
	if err != nil {
		return fmt.Errorf("%s: %w", s.opts.Name("grpc-max-connections"), err)
	}
	lis, err := listen(s.opts.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen grpc on %s (%s): %w", s.opts.GRPCAddr, s.opts.Name("grpc-addr"), err)
	}
	s.grpcLis = connlimit.New(lis, grpcCap)
	if err := s.listenRLQS(grpcCap); err != nil {
		return err
	}
	if s.http, err = httpserver.Listen(s.opts.HTTPAddr, s.httpHandler(), s.httpOpts); err != nil {
		return fmt.Errorf("listen http on %s (%s): %w", s.opts.HTTPAddr, s.opts.Name("http-addr"), err)
	}
	if err := s.openAdmin(); err != nil {
		return err
	}
	return s.openMetrics()
}

func (s *Server) serve() {
	s.serving.Store(true)
	s.serveGRPC(s.grpc, s.bounds.listener(s.grpcLis))
	s.serveGRPC(s.rlqsGRPC, s.rlqsLis)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
	if s.certs != nil {
		_ = s.certs.Close()
	}
	s.closeOps()
	if err := s.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	return errors.Join(errs...)
}

// closeListeners stops gRPC, HTTP, the admin and metrics listeners and
// the span exporter, each within stepTimeout.
func (s *Server) closeListeners(ctx context.Context) []error {
	var errs []error
	if err := s.closeRLQS(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close rlqs streams: %w", err))
	}
	if err := s.stopChild(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop the rlqs process: %w", err))
	}
	if s.grpcLis != nil {
		stopGRPC(s.grpc, stepTimeout)
	}
	if s.rlqsLis != nil {
		stopGRPC(s.rlqsGRPC, stepTimeout)
	}
	if s.http != nil {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		defer cancel()
		if err := s.http.Shutdown(sctx); err != nil {
			errs = append(errs, err)
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
	if s.http == nil {
		return ""
	}
	return s.http.Addr().String()
}

// spans is the decisions' span annotator: none with tracing off.
func spans(t *tracing.Tracing) rls.Annotator {
	if t == nil {
		return nil
	}
	return tracing.Spans{}
}
