package main

import (
	"context"
	"errors"
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

// handleHealth answers 200 when rules are loaded and the store answers.
func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if err := s.healthy(r.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "OK\n")
}

// handleReady is handleHealth that also fails while draining.
func (s *server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	s.handleHealth(w, r)
}

func (s *server) healthy(ctx context.Context) error {
	if s.limiter.Rules() == nil && !s.opts.xds.forceStart {
		return errors.New("no rules loaded")
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.storeTimeout, 250e6))
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return errors.New("store does not answer")
	}
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
