// Package httpserver builds HTTP servers bounded in time, header size and connections.
package httpserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
)

// Options bound a listener's connections. Zero fields take Defaults'.
type Options struct {
	ReadHeader     time.Duration // to read the request headers
	Read           time.Duration // to read the whole request, body included
	Write          time.Duration // from the end of the headers to the end of the response
	Idle           time.Duration // a keep-alive connection between requests
	MaxHeaderBytes int           // the request line and headers
	MaxConns       int           // open connections; more are reset at once (connlimit)
	// TLS, if set, serves HTTPS (HTTP/1.1) on the capped listener.
	TLS *tls.Config
}

// Defaults suit a listener of small requests from probes and scrapers.
var Defaults = Options{
	ReadHeader:     5 * time.Second,
	Read:           10 * time.Second,
	Write:          10 * time.Second,
	Idle:           60 * time.Second,
	MaxHeaderBytes: 64 << 10,
	MaxConns:       256,
}

func (o Options) withDefaults() Options {
	d := Defaults
	for _, f := range []struct{ v, def *time.Duration }{
		{&o.ReadHeader, &d.ReadHeader}, {&o.Read, &d.Read}, {&o.Write, &d.Write}, {&o.Idle, &d.Idle},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if o.MaxConns <= 0 {
		o.MaxConns = d.MaxConns
	}
	return o
}

// Server is an http.Server on a listener capped at Options.MaxConns.
type Server struct {
	srv   *http.Server
	lis   *connlimit.Listener
	serve net.Listener // lis, or TLS over it
}

// Listen binds addr (TCP) and returns a Server of h; Serve starts it.
func Listen(addr string, h http.Handler, o Options) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return New(lis, h, o), nil
}

// New returns a Server of h on lis, bounded by o.
func New(lis net.Listener, h http.Handler, o Options) *Server {
	o = o.withDefaults()
	s := &Server{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: o.ReadHeader, ReadTimeout: o.Read,
			WriteTimeout: o.Write, IdleTimeout: o.Idle, MaxHeaderBytes: o.MaxHeaderBytes},
		lis: connlimit.New(lis, o.MaxConns),
	}
	s.serve = s.lis
	if o.TLS != nil {
		s.serve = tls.NewListener(s.lis, o.TLS)
	}
	return s
}

// Serve serves until Shutdown or Close, then returns http.ErrServerClosed.
func (s *Server) Serve() error { return s.srv.Serve(s.serve) }

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Stats are the listener's connection counts.
func (s *Server) Stats() connlimit.Stats { return s.lis.Stats() }

// Shutdown waits for requests in flight until ctx ends, then closes the rest.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}
