package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// maxJSONBody bounds a /json request body.
const maxJSONBody = 4 << 20

func (s *server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", s.handleHealth)
	mux.HandleFunc("GET /ready", s.handleReady)
	mux.HandleFunc("POST /json", s.handleJSON)
	return mux
}

// healthOptions say what the health endpoints check besides the rules.
type healthOptions struct {
	// activeConn makes health depend on the store answering, as the
	// reference's REDIS_HEALTH_CHECK_ACTIVE_CONNECTION does.
	activeConn bool
	// oneConfig wants rules of at least one domain before health is OK.
	oneConfig bool
}

func addHealthFlags(fs *flag.FlagSet, o *healthOptions) {
	fs.BoolVar(&o.activeConn, "redis-health-check-active-connection", false,
		"/healthcheck, /ready and gRPC health fail while Redis does not answer (default: they do not depend on Redis; --on-store-error answers)")
	fs.BoolVar(&o.oneConfig, "healthy-with-at-least-one-config-loaded", false,
		"health fails until rules of at least one domain are loaded")
}

// Health failures.
var (
	errDraining = errors.New("draining")
	errNoStore  = errors.New("store does not answer")
)

// handleHealth answers 200 while the server can serve: rules loaded, not
// draining, and with --redis-health-check-active-connection the store
// answering. A Redis outage alone does not fail it: requests then get
// the --on-store-error answer, and a liveness probe must not restart
// every replica over it.
func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
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
func (s *server) handleReady(w http.ResponseWriter, r *http.Request) {
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
func (s *server) healthy(ctx context.Context) error {
	if s.draining.Load() {
		return errDraining
	}
	// A forced start (FORCE_START_WITHOUT_INITIAL_CONFIG) serves before
	// the first rules, unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED asks
	// for rules first, as in the reference.
	cur := s.rules.Current()
	switch {
	case cur == nil && (!s.opts.xds.forceStart || s.opts.health.oneConfig):
		return errNoRules
	case cur != nil && s.opts.health.oneConfig && len(cur.Set.Domains()) == 0:
		return errNoRules
	}
	if s.opts.health.activeConn {
		return s.pingStore(ctx)
	}
	return nil
}

// pingStore pings the store, and records that it answered.
func (s *server) pingStore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.storeTimeout, 250e6))
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return errNoStore
	}
	s.storeSeen.Store(true)
	return nil
}

// handleJSON decides a RateLimitRequest given as protojson: 200 when OK,
// 429 when OVER_LIMIT, 400 for bad input, 503 when the store fails.
func (s *server) handleJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		http.Error(w, "request body larger than 4 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, "cannot read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rls.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.service.decide(r.Context(), &req)
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, errNoRules):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, "rate-limit store unavailable", http.StatusServiceUnavailable)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rls.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}
