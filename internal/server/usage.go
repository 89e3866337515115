package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// usage is the answer of /v1/usage.
type usage struct {
	Domain     string       `json:"domain"`
	Descriptor []usageEntry `json:"descriptor"`
	Matched    bool         `json:"matched"`
	Rule       string       `json:"rule,omitempty"`
	Name       string       `json:"name,omitempty"`
	Algorithm  string       `json:"algorithm,omitempty"`
	Unit       string       `json:"unit,omitempty"`
	Unlimited  bool         `json:"unlimited,omitempty"`
	Limit      *uint32      `json:"limit,omitempty"`
	Remaining  *uint32      `json:"remaining,omitempty"`
	ResetMs    *int64       `json:"reset_ms,omitempty"`
	Tokens     *uint32      `json:"tokens,omitempty"`
	Burst      *float64     `json:"burst,omitempty"`
	FullInMs   *int64       `json:"full_in_ms,omitempty"`
	ShadowMode bool         `json:"shadow_mode,omitempty"`
	QuotaMode  bool         `json:"quota_mode,omitempty"`
}

type usageEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// handleUsage answers GET /v1/usage?domain=D&descriptor=k=v,k2=v2 with
// the state of one descriptor, consuming nothing: the request carries 0
// hits, which the stores treat as a peek. Keys and values may be
// percent-encoded, so that they can hold ',' and '='.
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	domain := r.URL.Query().Get("domain")
	entries, err := parseDescriptor(r.URL.RawQuery)
	if err == nil && domain == "" {
		err = errors.New("domain is required")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := limiter.Request[descriptors.Entry]{
		Domain:      domain,
		Descriptors: []limiter.Descriptor[descriptors.Entry]{{Entries: entries, HasHits: true}},
	}
	ctx := r.Context()
	if s.opts.StoreTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.StoreTimeout)
		defer cancel()
	}
	res, err := limiter.Check(ctx, s.limiter, &req)
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, "rate-limit store unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(toUsage(domain, entries, &res.Statuses[0]))
}

func toUsage(domain string, entries []descriptors.Entry, st *limiter.Status) usage {
	u := usage{Domain: domain, Descriptor: make([]usageEntry, len(entries))}
	for i, e := range entries {
		u.Descriptor[i] = usageEntry(e)
	}
	lim := st.Limit
	if lim == nil {
		return u
	}
	u.Matched, u.Rule, u.Name = true, lim.Path, lim.Name
	u.ShadowMode, u.QuotaMode = lim.ShadowMode, lim.QuotaMode
	if lim.Unlimited {
		u.Unlimited = true
		return u
	}
	u.Algorithm, u.Unit = lim.Algorithm.String(), lim.Unit.String()
	u.Limit = &lim.RequestsPerUnit
	remaining := st.Remaining
	if lim.Algorithm == descriptors.TokenBucket {
		burst := float64(lim.Burst) / descriptors.Milli
		u.Tokens, u.Burst, u.FullInMs = &remaining, &burst, &st.ResetMillis
		return u
	}
	u.Remaining, u.ResetMs = &remaining, &st.ResetMillis
	return u
}

// parseDescriptor reads the descriptor parameter of a raw query:
// comma-separated key=value entries, each part percent-decoded after
// splitting.
func parseDescriptor(rawQuery string) ([]descriptors.Entry, error) {
	raw, found := "", false
	for _, p := range strings.Split(rawQuery, "&") {
		k, v, _ := strings.Cut(p, "=")
		if k == "descriptor" {
			if found {
				return nil, errors.New("give one descriptor")
			}
			raw, found = v, true
		}
	}
	if raw == "" {
		return nil, errors.New("descriptor is required: key=value[,key2=value2...]")
	}
	var out []descriptors.Entry
	for _, part := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("descriptor entry %q is not key=value", part)
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("descriptor key %q: %w", k, err)
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("descriptor value %q: %w", v, err)
		}
		out = append(out, descriptors.Entry{Key: key, Value: value})
	}
	return out, nil
}
