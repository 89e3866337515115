// Package xdstest runs go-control-plane's own xDS server and snapshot
// cache in the test process, for tests of clients of RateLimitConfig
// resources, and records what the clients send back (ACKs and NACKs).
package xdstest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// TypeURL is the type of the resources served.
const TypeURL = resource.RateLimitConfigType

// ServerName is the DNS name a TLS server's certificate is made for,
// besides localhost: certtest.NewFiles(t, ServerName).
const ServerName = "xds.test"

// Server is an ADS server over a snapshot cache keyed by node id. Start
// makes one per test; it stops when the test ends.
type Server struct {
	// Addr is the loopback address the server listens on, kept across
	// Stop and Resume.
	Addr string

	tls   *tls.Config
	cache cachev3.SnapshotCache

	mu       sync.Mutex
	grpc     *grpc.Server
	requests []*discovery.DiscoveryRequest
	headers  []metadata.MD // of each stream opened
	changed  chan struct{} // closed and replaced on every request
}

// Start starts a server on a free loopback port; with cfg it serves TLS
// (and mTLS if cfg asks for client certificates).
func Start(t testing.TB, cfg *tls.Config) *Server {
	t.Helper()
	s := &Server{
		tls:     cfg,
		cache:   cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil),
		changed: make(chan struct{}),
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(lis net.Listener) {
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	g := grpc.NewServer(opts...)
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.record(nil, md)
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			s.record(proto.Clone(req).(*discovery.DiscoveryRequest), nil)
			return nil
		},
	}
	discovery.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), s.cache, cb))
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go func() { _ = g.Serve(lis) }()
}

func (s *Server) record(req *discovery.DiscoveryRequest, md metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req != nil {
		s.requests = append(s.requests, req)
	} else {
		s.headers = append(s.headers, md)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Set makes version, holding res, the snapshot of node.
func (s *Server) Set(t testing.TB, node, version string, res ...*rlsconf.RateLimitConfig) {
	t.Helper()
	if err := s.SetSnapshot(node, version, res...); err != nil {
		t.Fatal(err)
	}
}

// SetSnapshot is Set for callers without a testing.TB at hand.
func (s *Server) SetSnapshot(node, version string, res ...*rlsconf.RateLimitConfig) error {
	items := make([]types.Resource, len(res))
	for i, r := range res {
		items[i] = r
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{TypeURL: items})
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", version, err)
	}
	return s.cache.SetSnapshot(context.Background(), node, snap)
}

// Stop stops serving and ends every stream. It is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// Resume serves again on Addr, with the same snapshots, as a management
// server that restarted.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	var (
		lis net.Listener
		err error
	)
	// The port was just released; another process may hold it briefly.
	for range 50 {
		if lis, err = net.Listen("tcp", s.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.serve(lis)
}

// Requests returns the discovery requests received so far.
func (s *Server) Requests() []*discovery.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), s.requests...)
}

// Headers returns the metadata of each stream opened so far.
func (s *Server) Headers() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metadata.MD(nil), s.headers...)
}

// Wait returns the first request received so far, or within timeout,
// that ok accepts.
func (s *Server) Wait(timeout time.Duration, ok func(*discovery.DiscoveryRequest) bool) (*discovery.DiscoveryRequest, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		s.mu.Lock()
		reqs, changed := s.requests[seen:], s.changed
		seen = len(s.requests)
		s.mu.Unlock()
		for _, r := range reqs {
			if ok(r) {
				return r, nil
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil, fmt.Errorf("no such request in %v (%d requests)", timeout, seen)
		}
	}
}

// WaitACK waits for a request that accepts version.
func (s *Server) WaitACK(timeout time.Duration, version string) (*discovery.DiscoveryRequest, error) {
	return s.Wait(timeout, func(r *discovery.DiscoveryRequest) bool {
		return r.GetVersionInfo() == version && r.GetErrorDetail() == nil && r.GetResponseNonce() != ""
	})
}

// WaitNACK waits for a request that rejects a response.
func (s *Server) WaitNACK(timeout time.Duration) (*discovery.DiscoveryRequest, error) {
	return s.Wait(timeout, func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
}

// NACKs counts the rejecting requests received so far.
func (s *Server) NACKs() int {
	n := 0
	for _, r := range s.Requests() {
		if r.GetErrorDetail() != nil {
			n++
		}
	}
	return n
}

// Limit is a shorthand for a descriptor with a limit.
func Limit(key, value string, unit rlsconf.RateLimitUnit, rpu uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, Value: value,
		RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}}
}

// Config is a shorthand for a RateLimitConfig.
func Config(name, domain string, ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
}

// Version names the i-th snapshot of a test.
func Version(i int) string { return "v" + strconv.Itoa(i) }
