package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/httpserver"
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

// adminHandler serves the admin surface: the server's metrics, the rules
// in force, usage peeks and, if asked, pprof.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		Registry:          s.registry,
		ErrorLog:          zap.NewStdLog(s.log.Named("metrics")),
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /rlconfig", s.handleRLConfig)
	mux.HandleFunc("GET /v1/usage", s.handleUsage)
	if s.opts.Admin.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
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

// handleRLConfig writes the rules in force as text: a header of comment
// lines (hash, files or xDS resources), then one line per limit.
func (s *Server) handleRLConfig(w http.ResponseWriter, _ *http.Request) {
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
