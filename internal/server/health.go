package server

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// httpHandler serves the HTTP listener: health, readiness and the JSON
// API of the RateLimitService adapter (traced, if tracing is on).
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", s.handleHealth)
	mux.HandleFunc("GET /ready", s.handleReady)
	mux.Handle("POST /json", s.tracing.HTTP("POST /json", s.service.JSON()))
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not found: the admin API is on the admin listener ("+s.opts.Name("admin-addr")+", by default 127.0.0.1:6070), "+
			"not on the HTTP port", http.StatusNotFound)
	})
	return mux
}

// Health failures.
var (
	errDraining = errors.New("draining")
	errNoStore  = errors.New("store does not answer")
)

// handleHealth answers 200 while the server can serve: rules loaded, not
// draining, and with --health-requires-redis the store
// answering. A Redis outage alone does not fail it: requests then get
// the --on-store-error answer, and a liveness probe must not restart
// every replica over it.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if err := s.healthy(r.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "OK\n")
}

// handleReady is handleHealth that also waits, after the start, for the
// store to answer once: a replica that cannot reach Redis at all (a wrong
// address, say) takes no traffic, while an outage of Redis later leaves
// every replica ready for --on-store-error to answer.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	err := s.healthy(r.Context())
	if err == nil && !s.storeSeen.Load() {
		err = s.pingStore(r.Context())
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "OK\n")
}

// healthy returns why the server cannot serve, nil when it can.
func (s *Server) healthy(ctx context.Context) error {
	if s.draining.Load() {
		return errDraining
	}
	// A forced start (FORCE_START_WITHOUT_INITIAL_CONFIG) serves before
	// the first rules, unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED asks
	// for rules first, as in the reference.
	cur := s.rules.Current()
	switch {
	case cur == nil && (!s.opts.XDS.StartWithoutRules || s.opts.Health.RequiresRules):
		return limiter.ErrNoRules
	case cur != nil && s.opts.Health.RequiresRules && len(cur.Set.Domains()) == 0:
		return limiter.ErrNoRules
	}
	if s.opts.Health.RequiresRedis {
		return s.pingStore(ctx)
	}
	return nil
}

// pingStore pings the store, and records that it answered.
func (s *Server) pingStore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.StoreTimeout, 250e6))
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return errNoStore
	}
	s.storeSeen.Store(true)
	return nil
}
