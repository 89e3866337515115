// Package admin serves the admin listener's HTTP API: metrics, the rules
// in force, the top identifiers, explain, usage peeks, counter resets and
// refunds, the page, and pprof if asked; its authorization and audit; and
// the JSON of its answers, which the operators' commands (package opsctl)
// read too.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// Rules are the rules in force and how their loads went.
type Rules interface {
	// Current returns the rules in force, nil before the first load.
	Current() *rules.Loaded
	// Reload returns how the loads went, nil before any reload.
	Reload() *ReloadStatus
}

// Options are what the admin API reads and acts on. Settings, Log,
// Registry, Limiter, Rules and Store are required.
type Options struct {
	Settings *settings.Settings
	Log      *zap.Logger
	// Registry is what /metrics serves, and the page's rule counters.
	Registry *prometheus.Registry
	Version  string
	Limiter  *limiter.Limiter
	Rules    Rules
	// Store reports the store's state; Resetter clears counters (nil:
	// resets answer 503).
	Store    func() StoreStatus
	Resetter limiter.Resetter
	Top      *top.Tracker    // nil with --top-keys 0
	RLQS     *rlqs.Service   // nil with --rlqs=false
	RefStats *refstats.Stats // nil without the reference's stats
	// Args is the command line /stats and /debug/pprof/cmdline show, its
	// secrets masked.
	Args []string
	// Now is the clock of the audit log's refusals (nil: time.Now).
	Now func() time.Time
}

// API is the admin listener's API. New reads the token file; the
// token file is read again when it changes, from the handler.
type API struct {
	o       Options
	log     *zap.Logger
	metrics *metrics.Admin
	auth    *authorizer
	audit   *auditLog
	// counts caches the rule counters the page shows.
	counts countsCache
}

// New builds the API of o and registers its series on o.Registry. A
// token file that cannot be read or parsed is refused (logged, counted)
// and puts no token in force, as when it changes later.
func New(o Options) (*API, error) {
	a := &API{o: o, log: o.Log.Named("admin")}
	var err error
	if a.metrics, err = metrics.NewAdmin(o.Registry); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	a.auth = newAuthorizer(o.Settings.Admin, a.log, a.metrics)
	now := o.Now
	if now == nil {
		now = time.Now
	}
	a.audit = newAuditLog(o.Log.Named("audit"), now)
	return a, nil
}

// Handler serves the admin listener. beyondLoopback says whether it is
// reachable from other hosts (bound to an address that is not loopback):
// the reads that reveal identifiers then need the writes' authorization.
func (a *API) Handler(beyondLoopback bool) http.Handler {
	g := &guard{a: a, hosts: a.o.Settings.Admin.HostNames(), beyondLoopback: beyondLoopback}
	mux := http.NewServeMux()
	var idx index
	handle := func(method, path, help string, need access, h http.Handler) {
		mux.Handle(path, allowOnly(method, g.wrap(need, h)))
		idx = append(idx, endpoint{path, help})
	}
	get := func(path, help string, need access, h http.HandlerFunc) { handle(http.MethodGet, path, help, need, h) }
	post := func(path, help string, need access, h http.HandlerFunc) {
		handle(http.MethodPost, path, "POST: "+help, need, h)
	}
	handle(http.MethodGet, "/metrics", "FastLimit's Prometheus metrics", open, a.MetricsHandler())
	get("/rlconfig", "print out the currently loaded configuration for debugging", open, a.handleRLConfig)
	get("/stats", "print out stats", open, a.handleStats)
	get("/v1/rules", "the rules in force with FastLimit's fields, their hash and files", open, a.handleRules)
	get("/v1/usage", "peek at a descriptor's counter without charging it", identifiers, a.handleUsage)
	get("/v1/quota", "how a quota bucket's limit is divided among Envoys (rate limit quota service)", identifiers, a.handleRLQSUsage)
	get("/v1/top", "the identifiers with the most over-limit hits (or hits) of each rule: ?[domain=D][&rule=R][&by=over_limit|hits][&n=N]",
		identifiers, a.handleTop)
	get("/v1/status", "the admin page's state as JSON: store, rules reload, top limited identifiers, RLQS", identifiers, a.handleStatus)
	get("/v1/status/rules", "the rules in force with their files and decisions as JSON: ?[q=filter][&offset=N][&limit=N]", open, a.handleStatusRules)
	post("/v1/explain", "a RateLimitRequest as /json takes it, or {domain, bucket}: each descriptor's rule, keys and state, charging nothing",
		identifiers, a.handleExplain)
	post("/v1/counters/reset", "{domain, descriptors} or {domain, rule, values}: clear the descriptor's counters (authorized, audited)",
		write, a.handleReset)
	post("/v1/counters/refund", "{domain, descriptors, hits}: give hits back, as is_negative_hits does (authorized, audited)", write, a.handleRefund)
	if a.o.Settings.Admin.Pprof {
		handle(http.MethodGet, "/debug/pprof/", "root of various pprof endpoints. hit for help.", identifiers, http.HandlerFunc(pprof.Index))
		mux.Handle("/debug/pprof/cmdline", allowOnly(http.MethodGet, g.wrap(identifiers, http.HandlerFunc(a.handleCmdline))))
		get("/debug/pprof/profile", "CPU profiling endpoint", identifiers, pprof.Profile)
		mux.Handle("/debug/pprof/symbol", allowOnly(http.MethodGet, g.wrap(identifiers, http.HandlerFunc(pprof.Symbol))))
		get("/debug/pprof/trace", "trace endpoint", identifiers, pprof.Trace)
	}
	slices.SortFunc(idx, func(a, b endpoint) int { return strings.Compare(a.path, b.path) })
	mux.Handle("/", allowOnly(http.MethodGet, a.home(idx, g.wrap(identifiers, http.HandlerFunc(a.handlePage)))))
	return g.host(mux)
}

// MetricsHandler serves the registry: /metrics of the admin listener
// and of --metrics-addr.
func (a *API) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(a.o.Registry, promhttp.HandlerOpts{
		Registry:          a.o.Registry,
		ErrorLog:          zap.NewStdLog(a.o.Log.Named("metrics")),
		EnableOpenMetrics: true,
	})
}

// allowOnly serves h to requests of method (GET includes HEAD) and
// answers others 405 with an Allow header.
func allowOnly(method string, h http.Handler) http.Handler {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", allow)
			http.Error(w, r.Method+" is not served at "+r.URL.Path+"; it answers "+allow, http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// endpoint is one line of the admin index.
type endpoint struct{ path, help string }

// index lists the admin endpoints, sorted by path, one "<path>: <help>"
// line each, as the reference's debug listener lists its own at "/" and
// at every path it does not serve.
type index []endpoint

func (idx index) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	for _, e := range idx {
		b.WriteString(e.path + ": " + e.help + "\n")
	}
	_, _ = io.WriteString(w, b.String())
}

// storeTimeout is the least time an admin call waits for the store:
// operators are not Envoy's 20 ms deadline.
const storeTimeout = 2 * time.Second

// storeCtx bounds an admin call's store work: --store-timeout, and at
// least storeTimeout.
func (a *API) storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), max(a.o.Settings.StoreTimeout, storeTimeout))
}

// storeError answers a limiter error: 400 for an invalid request, 503
// before any rules or when the store fails.
func storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, limiter.ErrNoRules):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		http.Error(w, "rate-limit store unavailable: "+err.Error(), http.StatusServiceUnavailable)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
