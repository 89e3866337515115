package server

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/edge/httpserver"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// adminHTTP bounds the admin listener: the defaults, with a longer write
// timeout, so that a /debug/pprof/profile or trace of up to a minute can
// answer.
var adminHTTP = func() httpserver.Options {
	o := httpserver.Defaults
	o.Write = 75 * time.Second
	return o
}()

// admin is the admin HTTP listener.
type admin struct {
	srv *httpserver.Server
}

// adminHandler serves the admin surface, envoyproxy/ratelimit's debug
// listener's endpoints and FastLimit's: the server's metrics, the rules in
// force (the reference's /rlconfig and FastLimit's /v1/rules), /stats,
// usage peeks, the top identifiers, explain, counter writes, the page
// and, if asked, pprof. "/" and any other path answer a GET with the page
// (to a browser) or the index, as the reference's listener answers; every
// path answers 405 to a method it does not serve.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	var idx adminIndex
	handle := func(method, path, help string, h http.Handler) {
		mux.Handle(path, allowOnly(method, h))
		idx = append(idx, adminEndpoint{path, help})
	}
	get := func(path, help string, h http.HandlerFunc) { handle(http.MethodGet, path, help, h) }
	post := func(path, help string, h http.HandlerFunc) { handle(http.MethodPost, path, "POST: "+help, h) }
	handle(http.MethodGet, "/metrics", "FastLimit's Prometheus metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		Registry:          s.registry,
		ErrorLog:          zap.NewStdLog(s.log.Named("metrics")),
		EnableOpenMetrics: true,
	}))
	get("/rlconfig", "print out the currently loaded configuration for debugging", s.handleRLConfig)
	get("/stats", "print out stats", s.handleStats)
	get("/v1/rules", "the rules in force with FastLimit's fields, their hash and files", s.handleRules)
	get("/v1/usage", "peek at a descriptor's counter without charging it", s.handleUsage)
	get("/v1/quota", "how a quota bucket's limit is divided among Envoys (rate limit quota service)", s.handleRLQSUsage)
	get("/v1/top", "the identifiers with the most over-limit hits (or hits) of each rule: ?domain=D[&rule=R][&by=over_limit|hits][&n=N]", s.handleTop)
	get("/v1/status", "the admin page's state as JSON: store, rules reload, top limited identifiers, RLQS", s.handleStatus)
	get("/v1/status/rules", "the rules in force with their files and decisions as JSON: ?[q=filter][&offset=N][&limit=N]", s.handleStatusRules)
	post("/v1/explain", "a RateLimitRequest as /json takes it, or {domain, bucket}: each descriptor's rule, keys and state, charging nothing", s.handleExplain)
	post("/v1/counters/reset", "{domain, descriptors} or {domain, rule, values}: clear the descriptor's counters (authorized, audited)", s.handleReset)
	post("/v1/counters/refund", "{domain, descriptors, hits}: give hits back, as is_negative_hits does (authorized, audited)", s.handleRefund)
	if s.opts.Admin.Pprof {
		handle(http.MethodGet, "/debug/pprof/", "root of various pprof endpoints. hit for help.", http.HandlerFunc(pprof.Index))
		mux.Handle("/debug/pprof/cmdline", allowOnly(http.MethodGet, http.HandlerFunc(handleCmdline)))
		get("/debug/pprof/profile", "CPU profiling endpoint", pprof.Profile)
		mux.Handle("/debug/pprof/symbol", allowOnly(http.MethodGet, http.HandlerFunc(pprof.Symbol)))
		get("/debug/pprof/trace", "trace endpoint", pprof.Trace)
	}
	slices.SortFunc(idx, func(a, b adminEndpoint) int { return strings.Compare(a.path, b.path) })
	mux.Handle("/", allowOnly(http.MethodGet, s.home(idx)))
	return mux
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

// adminEndpoint is one line of the admin index.
type adminEndpoint struct{ path, help string }

// adminIndex lists the admin endpoints, sorted by path, one
// "<path>: <help>" line each, as the reference's debug listener lists its
// own at "/" and at every path it does not serve.
type adminIndex []adminEndpoint

func (idx adminIndex) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	for _, e := range idx {
		b.WriteString(e.path + ": " + e.help + "\n")
	}
	_, _ = io.WriteString(w, b.String())
}

// openAdmin binds and serves the admin listener, if one is configured.
func (s *Server) openAdmin(h http.Handler) error {
	if s.opts.Admin.Off() {
		return nil
	}
	srv, err := httpserver.Listen(s.opts.Admin.Addr, h, s.adminOpts)
	if err != nil {
		return fmt.Errorf("listen admin on %s (%s): %w; the admin listener serves /metrics and /rlconfig: "+
			"give it a free address (--admin-addr, ADMIN_ADDR, or DEBUG_HOST and DEBUG_PORT), "+
			"or turn it off with --admin-addr off (ADMIN_ADDR=off)",
			s.opts.Admin.Addr, s.opts.Name("admin-addr"), err)
	}
	s.admin = &admin{srv: srv}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", zap.Error(err))
		}
	}()
	return nil
}

// AdminAddr is the bound admin address, "" when there is none.
func (s *Server) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.srv.Addr().String()
}

// closeAdmin shuts the admin listener down, bounded by timeout.
func (s *Server) closeAdmin(ctx context.Context, timeout time.Duration) error {
	if s.admin == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.admin.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

// handleRLConfig writes the rules in force in the reference's /rlconfig
// layout, one line per limit,
//
//	domain.key_value.key: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false
//
// (an unlimited rule reads unit=UNKNOWN requests_per_unit=0; a rule with
// several limits has a line for each, by its Label), in the rules' order
// where the reference's follows Go's map order. Before any
// rules the body is empty, as the reference's.
func (s *Server) handleRLConfig(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	cur := s.rules.Current()
	if cur == nil {
		return
	}
	var b strings.Builder
	for _, l := range cur.Set.Limits() {
		unit, rpu := l.Unit.String(), l.RequestsPerUnit
		if l.Unlimited {
			unit, rpu = descriptors.UnitUnknown.String(), 0
		}
		fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
			l.Label(), unit, rpu, l.ShadowMode, l.QuotaMode)
	}
	_, _ = io.WriteString(w, b.String())
}

// handleStats writes what the reference's /stats writes, its process's
// published expvars ("cmdline: [...]", "memstats: {...}"), one
// "<name>: <value>" line each, the command line's secrets masked
// (settings.MaskArgs), and, when the reference's stats are on, a
// "ratelimit: {...}" line of their counters by stat name.
func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	expvar.Do(func(kv expvar.KeyValue) {
		v := kv.Value.String()
		if kv.Key == "cmdline" {
			j, _ := json.Marshal(settings.MaskArgs(os.Args))
			v = string(j)
		}
		b.WriteString(kv.Key + ": " + v + "\n")
	})
	if s.ref != nil {
		counters := map[string]uint64{}
		for _, c := range s.ref.Stats().Counters() {
			counters[c.Name()] = c.Value()
		}
		if j, err := json.Marshal(counters); err == nil {
			b.WriteString("ratelimit: " + string(j) + "\n")
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// handleCmdline is pprof.Cmdline with the secrets masked
// (settings.MaskArgs): the arguments separated by NUL bytes.
func handleCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, strings.Join(settings.MaskArgs(os.Args), "\x00"))
}

// handleRules writes the rules in force with FastLimit's fields: a header
// of comment lines (hash, files or xDS resources, the last failed reload's
// time and errors if a reload failed), then one line per limit. Before any
// rules it answers 503.
func (s *Server) handleRules(w http.ResponseWriter, _ *http.Request) {
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
	if cur.Overlay != "" {
		_, _ = fmt.Fprintf(w, "# rules overlay %s\n", cur.Overlay)
	}
	for _, wn := range cur.Warnings {
		_, _ = fmt.Fprintf(w, "# warning: %s\n", strings.ReplaceAll(wn.Error(), "\n", " "))
	}
	if st := s.rules.status.Load(); st != nil && len(st.Errors) > 0 {
		state := "the rules below, of an earlier load, are in force"
		if !st.Failing {
			state = "rules loaded since, last at " + st.At.UTC().Format(time.RFC3339)
		}
		_, _ = fmt.Fprintf(w, "# last failed reload at %s (%s):\n", st.ErrorAt.UTC().Format(time.RFC3339), state)
		for _, e := range st.Errors {
			_, _ = fmt.Fprintf(w, "#   %s\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
	_ = cur.Set.Dump(w)
}
