package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// adminOptions configure hot reload, metrics and the admin listener.
type adminOptions struct {
	addr      string  // admin listener; empty: none
	pprof     bool    // serve /debug/pprof/ on the admin listener
	nearRatio float64 // share of a limit past which hits are near it
	// maxDetailed bounds the rule series labelled with request values.
	maxDetailed int
	// timeouts bound the connections of the HTTP and admin listeners
	// (not flags: tests shorten them).
	timeouts httpTimeouts
}

// httpTimeouts bound an HTTP listener's connections, so that a client that
// stalls (headers or a body sent in part, a response never read, an idle
// keep-alive) cannot hold a connection and its goroutine forever.
type httpTimeouts struct {
	readHeader time.Duration // request headers
	read       time.Duration // the whole request, body included
	write      time.Duration // from the end of the headers to the end of the response
	idle       time.Duration // a keep-alive connection between requests
	// adminWrite is the admin listener's write timeout: longer, so that
	// a /debug/pprof/profile or trace of up to a minute can answer.
	adminWrite time.Duration
}

var defaultHTTPTimeouts = httpTimeouts{
	readHeader: 5 * time.Second,
	read:       10 * time.Second,
	write:      10 * time.Second,
	idle:       60 * time.Second,
	adminWrite: 75 * time.Second,
}

// newHTTPServer is an http.Server of h bounded by t, writing within write.
func newHTTPServer(h http.Handler, t httpTimeouts, write time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.readHeader, ReadTimeout: t.read,
		WriteTimeout: write, IdleTimeout: t.idle}
}

func addAdminFlags(fs *flag.FlagSet, o *adminOptions) {
	o.timeouts = defaultHTTPTimeouts
	fs.StringVar(&o.addr, "admin-addr", "127.0.0.1:6070",
		"admin HTTP address: /metrics, /rlconfig, /v1/usage (and /debug/pprof/ with --pprof); empty or off disables it")
	fs.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof/ on the admin address")
	fs.Float64Var(&o.nearRatio, "near-limit-ratio", 0.8,
		"share of a limit used past which allowed hits also count as near the limit, in (0, 1]")
	fs.IntVar(&o.maxDetailed, "max-detailed-metric-series", defaultMaxDetailedSeries,
		"most rule series labelled with request values (detailed_metric, value_to_metric); past it, hits count under the rule's path and in fastlimit_rule_detailed_series_folded_total (0: no bound)")
}

func (o *adminOptions) validate() error {
	if !(o.nearRatio > 0 && o.nearRatio <= 1) {
		return badSetting("near-limit-ratio", "%v is not in (0, 1]", o.nearRatio)
	}
	if o.maxDetailed < 0 {
		return fmt.Errorf("--max-detailed-metric-series: %d is negative", o.maxDetailed)
	}
	return nil
}

// off reports whether the admin listener is turned off.
func (o *adminOptions) off() bool { return o.addr == "" || strings.EqualFold(o.addr, "off") }

// admin is the admin HTTP listener.
type admin struct {
	srv *http.Server
	lis net.Listener
}

// adminHandler serves the admin surface: the server's metrics, the rules
// in force, usage peeks and, if asked, pprof.
func (s *server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		Registry:          s.registry,
		ErrorLog:          zap.NewStdLog(s.log.Named("metrics")),
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /rlconfig", s.handleRLConfig)
	mux.HandleFunc("GET /v1/usage", s.handleUsage)
	if s.opts.admin.pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// openAdmin binds and serves the admin listener, if one is configured.
func (s *server) openAdmin(h http.Handler) error {
	if s.opts.admin.off() {
		return nil
	}
	lis, err := net.Listen("tcp", s.opts.admin.addr)
	if err != nil {
		return fmt.Errorf("listen admin on %s (%s): %w; the admin listener serves /metrics and /rlconfig: "+
			"give it a free address (--admin-addr, ADMIN_ADDR, or DEBUG_HOST and DEBUG_PORT), "+
			"or turn it off with --admin-addr off (ADMIN_ADDR=off)",
			s.opts.admin.addr, s.opts.name("admin-addr"), err)
	}
	s.admin = &admin{
		srv: newHTTPServer(h, s.opts.admin.timeouts, s.opts.admin.timeouts.adminWrite),
		lis: lis,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.admin.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", zap.Error(err))
		}
	}()
	return nil
}

// adminAddr is the bound admin address, "" when there is none.
func (s *server) adminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.lis.Addr().String()
}

// closeAdmin shuts the admin listener down, bounded by timeout.
func (s *server) closeAdmin(ctx context.Context, timeout time.Duration) error {
	if s.admin == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.admin.srv.Shutdown(ctx); err != nil {
		_ = s.admin.srv.Close()
		return fmt.Errorf("admin shutdown: %w", err)
	}
	return nil
}

// handleRLConfig writes the rules in force as text: a header of comment
// lines (hash, files or xDS resources), then one line per limit.
func (s *server) handleRLConfig(w http.ResponseWriter, _ *http.Request) {
	cur := s.rules.Current()
	if cur == nil {
		http.Error(w, "no rules loaded", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	kind, names := "file", cur.Files
	if cur.FromXDS {
		kind, names = "xds resource", cur.Resources
	}
	_, _ = fmt.Fprintf(w, "# hash %s\n# %d %ss, %d domains, %d limits\n",
		cur.Hash, len(names), kind, len(cur.Set.Domains()), len(cur.Set.Limits()))
	for _, f := range names {
		_, _ = fmt.Fprintf(w, "# %s %s\n", kind, f)
	}
	_ = cur.Set.Dump(w)
}

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
func (s *server) handleUsage(w http.ResponseWriter, r *http.Request) {
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
	if s.opts.storeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.storeTimeout)
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
