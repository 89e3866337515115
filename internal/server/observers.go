package server

import (
	"fmt"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
	"github.com/fastlimit/fastlimit/internal/edge/httpserver"
	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/rls"
)

// newObservers builds FastLimit's metrics, the reference's stats and the
// rules source that reports loads to both.
func (s *Server) newObservers() error {
	o := s.opts
	var err error
	if s.metrics, err = metrics.New(s.registry, o.Metrics); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := metrics.RegisterStore(s.registry, storeReaders(s.store)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := metrics.RegisterBuildInfo(s.registry, s.version); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	s.bounds = &grpcBounds{o: o.GRPC}
	if err := metrics.RegisterGRPCBounds(s.registry, metrics.GRPCBounds{Conns: s.grpcConns,
		StreamsRefused: &s.bounds.streamsRefused, TimedOut: &s.bounds.timedOut, IdleClosed: &s.bounds.idleClosed}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := s.registerListenerMetrics(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	ro := o.RefStats
	ro.HTTP = httpserver.Options{MaxConns: s.httpOpts.MaxConns}
	if s.ref, err = refstats.New(ro, s.limiter, s.registry, s.log.Named("refstats")); err != nil {
		return err
	}
	loads := loadObservers{s.metrics}
	if st := s.ref.Stats(); st != nil {
		loads = append(loads, st)
		addStoreStats(st, s.store)
	}
	if to := o.Top; to.Keys > 0 {
		to.Log = s.log.Named("top")
		s.top = top.New(to)
		loads = append(loads, s.top)
	}
	s.failures = newFailureLog(s.log.Named("store"), o.OnStoreError)
	s.rules = newRuleSource(o.Rules(), s.limiter, loads, s.log.Named("rules"))
	s.rules.onRemoved = s.metrics.DomainsRemoved
	return nil
}

// observer is what the RateLimitService adapter tells of each decision.
func (s *Server) observer() rls.Observer {
	obs := rls.Observers{s.metrics, s.failures}
	if st := s.ref.Stats(); st != nil {
		obs = append(obs, st)
	}
	if s.top != nil {
		obs = append(obs, s.top)
	}
	return obs
}

// registerListenerMetrics registers the HTTP listeners' connection
// counts, by listener: http, admin, prometheus (the reference's).
func (s *Server) registerListenerMetrics() error {
	stats := func(name string) func() (connlimit.Stats, bool) {
		return func() (connlimit.Stats, bool) {
			switch {
			case name == "http" && s.http != nil:
				return s.http.Stats(), true
			case name == "admin" && s.admin != nil:
				return s.admin.Stats(), true
			case name == "metrics" && s.metricsSrv != nil:
				return s.metricsSrv.Stats(), true
			case name == "prometheus":
				return s.ref.ListenerStats()
			}
			return connlimit.Stats{}, false
		}
	}
	return metrics.RegisterHTTPListeners(s.registry, map[string]func() (connlimit.Stats, bool){
		"http": stats("http"), "admin": stats("admin"), "prometheus": stats("prometheus"), "metrics": stats("metrics"),
	})
}

// grpcConns are the gRPC listener's counts, zero before Open.
func (s *Server) grpcConns() connlimit.Stats {
	if s.grpcLis == nil {
		return connlimit.Stats{}
	}
	return s.grpcLis.Stats()
}
