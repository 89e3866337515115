package rls

import (
	"errors"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// maxJSONBody bounds a /json request body.
const maxJSONBody = 4 << 20

// JSON returns the handler of POST /json: it decides a RateLimitRequest
// given as protojson, as ShouldRateLimit does, and answers the response as
// protojson with 200 when OK, 429 when OVER_LIMIT, 400 for bad input and
// 503 when there are no rules yet or the store fails.
func (s *Service) JSON() http.Handler {
	return http.HandlerFunc(s.serveJSON)
}

func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		http.Error(w, "request body larger than 4 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, "cannot read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rlspb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.decide(r.Context(), &req)
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, limiter.ErrNoRules):
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
	if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}
