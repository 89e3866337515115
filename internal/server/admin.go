package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/edge/certs"
	"github.com/fastlimit/fastlimit/internal/edge/httpserver"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// adminHTTP bounds the admin listener: the defaults, with a longer write
// timeout, so that a /debug/pprof/profile or trace of up to a minute can
// answer.
var adminHTTP = func() httpserver.Options {
	o := httpserver.Defaults
	o.Write = 75 * time.Second
	return o
}()

// newAdmin builds the admin API (package admin) and the admin
// listener's TLS, if any.
func (s *Server) newAdmin() error {
	var err error
	s.adminAPI, err = admin.New(admin.Options{
		Settings: s.opts, Log: s.log, Registry: s.registry, Version: s.version,
		Limiter: s.limiter, Rules: s.rules, Store: s.storeStatus, Resetter: s.resetter(),
		Top: s.top, RLQS: s.rlqs, RefStats: s.ref.Stats(), Args: os.Args,
	})
	if err != nil {
		return err
	}
	s.adminCerts, s.adminOpts.TLS, err = adminTLS(s.opts.Admin, s.log.Named("admin"))
	return err
}

// openAdmin binds and serves the admin listener, if one is configured.
func (s *Server) openAdmin() error {
	if s.opts.Admin.Off() {
		return nil
	}
	lis, err := net.Listen("tcp", s.opts.Admin.Addr)
	if err != nil {
		return fmt.Errorf("listen admin on %s (%s): %w; the admin listener serves /metrics and /rlconfig: "+
			"give it a free address (--admin-addr, ADMIN_ADDR, or DEBUG_HOST and DEBUG_PORT), "+
			"or turn it off with --admin-addr off (ADMIN_ADDR=off)",
			s.opts.Admin.Addr, s.opts.Name("admin-addr"), err)
	}
	s.admin = httpserver.New(lis, s.adminAPI.Handler(!isLoopback(lis.Addr())), s.adminOpts)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.admin.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", zap.Error(err))
		}
	}()
	return nil
}

// openMetrics binds and serves --metrics-addr, if given: /metrics
// alone, for a Prometheus that must not reach the admin listener.
func (s *Server) openMetrics() error {
	if s.opts.Admin.MetricsOff() {
		return nil
	}
	srv, err := httpserver.Listen(s.opts.Admin.MetricsAddr, s.metricsMux(), s.httpOpts)
	if err != nil {
		return fmt.Errorf("listen metrics on %s (%s): %w", s.opts.Admin.MetricsAddr, s.opts.Name("metrics-addr"), err)
	}
	s.serveMetrics(srv)
	return nil
}

// metricsMux serves /metrics alone.
func (s *Server) metricsMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.adminAPI.MetricsHandler())
	return mux
}

// serveMetrics serves srv, the metrics listener, until Close.
func (s *Server) serveMetrics(srv *httpserver.Server) {
	s.metricsSrv = srv
	s.wg.Go(func() {
		if err := srv.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics server stopped", zap.Error(err))
		}
	})
}

// MetricsAddr is the bound address of --metrics-addr, "" when there is
// none.
func (s *Server) MetricsAddr() string {
	if s.metricsSrv == nil {
		return ""
	}
	return s.metricsSrv.Addr().String()
}

// isLoopback reports whether addr, a bound address, is reachable from this
// host alone.
func isLoopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// AdminAddr is the bound admin address, "" when there is none.
func (s *Server) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr().String()
}

// closeAdmin shuts the admin and metrics listeners down, bounded by
// timeout.
func (s *Server) closeAdmin(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	if s.admin != nil {
		if err := s.admin.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("admin: %w", err))
		}
	}
	if s.metricsSrv != nil {
		if err := s.metricsSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("metrics: %w", err))
		}
	}
	return errors.Join(errs...)
}

// adminTLS returns the admin listener's TLS configuration and its
// certificate reloader, or none without --admin-tls-cert. With a client
// CA, a client certificate is asked for and verified when given: it
// authorizes what needs authorization (package admin).
func adminTLS(o settings.Admin, log *zap.Logger) (*certs.Reloader, *tls.Config, error) {
	if o.TLSCert == "" {
		return nil, nil, nil
	}
	r, err := certs.New(certs.Options{
		Cert:     certs.File{Name: "--admin-tls-cert", Path: o.TLSCert},
		Key:      certs.File{Name: "--admin-tls-key", Path: o.TLSKey},
		ClientCA: certs.File{Name: "--admin-tls-client-ca", Path: o.TLSClientCA},
	}, log)
	if err != nil {
		return nil, nil, err
	}
	conf := r.ServerConfig()
	if o.TLSClientCA != "" {
		get := conf.GetConfigForClient
		conf.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := get(hi)
			if err != nil {
				return nil, err
			}
			c = c.Clone()
			c.ClientAuth = tls.VerifyClientCertIfGiven
			return c, nil
		}
	}
	return r, conf, nil
}

// storeStatus is the store's state, for the admin API.
func (s *Server) storeStatus() admin.StoreStatus {
	st := admin.StoreStatus{Kind: storeKind(s.opts), Name: storeName(s.opts), Answered: s.storeSeen.Load()}
	switch g := s.store.(type) {
	case *store.Memory:
		ms := g.Stats()
		st.MemoryKeys, st.MemoryRefused, st.MemoryMaxKeys = &ms.Keys, &ms.Refused, s.opts.Memory.MaxKeys
	case *guarded:
		st.Breaker = g.breaker.State().String()
		if g.cache != nil {
			cs := g.cache.Stats()
			st.CacheEntries, st.CacheHits = &cs.Entries, &cs.Hits
		}
	}
	return st
}

// resetter is the store's limiter.Resetter: the embedded store, or Redis
// with the over-limit cache forgetting the keys it clears.
func (s *Server) resetter() limiter.Resetter {
	switch st := s.store.(type) {
	case *store.Memory:
		return st
	case *guarded:
		return st
	}
	return nil
}

// Reset clears ops' keys on Redis, past the circuit breaker, and drops the
// over-limit cache's denials of them.
func (g *guarded) Reset(ctx context.Context, ops []limiter.Op) error {
	err := g.redis.Reset(ctx, ops)
	if g.cache != nil {
		for i := range ops {
			g.cache.Forget(ops[i].Key)
		}
	}
	return err
}
