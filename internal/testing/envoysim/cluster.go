package envoysim

import (
	"context"
	"errors"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthCheck is the RLQS cluster's grpc_health_check: every Interval a
// Check with Timeout, a host unhealthy after Unhealthy failures in a row
// and healthy again after Healthy successes. A zero Interval checks none.
type HealthCheck struct {
	Interval, Timeout  time.Duration
	Unhealthy, Healthy int
}

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	Hosts          []string      // host:port of each endpoint
	First          int           // the host of the first stream (round robin from there)
	ConnectTimeout time.Duration // connect_timeout: a stream not open by then fails (default 1s)
	HealthCheck    HealthCheck
	Keepalive      Keepalive // its Timeout bounds a ping (a Check on the stream's connection)
}

// Cluster is Envoy's RLQS cluster of real hosts, on the wall clock: one
// HTTP/2 connection a host, each new stream on the next host round robin
// among those its health checks find healthy (all of them when none is:
// Envoy's panic mode). Its streams answer pings (a health Check on their
// connection: a host that is stopped answers neither) and abort their
// connection (the next stream to that host dials a new one).
type Cluster struct {
	cfg   ClusterConfig
	hosts []*host
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu   sync.Mutex
	next int
}

type host struct {
	addr string

	mu      sync.Mutex
	cc      *grpc.ClientConn
	healthy bool
	fails   int
	oks     int
}

// NewCluster returns a cluster of cfg.Hosts and starts its health checks.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{cfg: cfg, stop: cancel, next: cfg.First - 1}
	for _, addr := range cfg.Hosts {
		c.hosts = append(c.hosts, &host{addr: addr, healthy: true})
	}
	if hc := cfg.HealthCheck; hc.Interval > 0 {
		for _, h := range c.hosts {
			c.wg.Go(func() { c.check(ctx, h) })
		}
	}
	return c, nil
}

// Close stops the health checks and closes the connections.
func (c *Cluster) Close() {
	c.stop()
	c.wg.Wait()
	for _, h := range c.hosts {
		h.reset()
	}
}

// Healthy reports whether the health checks find host i healthy.
func (c *Cluster) Healthy(i int) bool {
	h := c.hosts[i]
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.healthy
}

// check health-checks h every Interval until ctx ends.
func (c *Cluster) check(ctx context.Context, h *host) {
	hc := c.cfg.HealthCheck
	for wait := time.NewTimer(hc.Interval); ; wait.Reset(hc.Interval) {
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
			h.checked(h.probe(ctx, hc.Timeout), hc)
		}
	}
}

// probe is one health check of h: nil if it answers SERVING in time.
func (h *host) probe(ctx context.Context, timeout time.Duration) error {
	cc, err := h.conn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil && r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		err = errors.New("not serving")
	}
	return err
}

// checked counts a health check's outcome towards h's health.
func (h *host) checked(err error, hc HealthCheck) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.fails, h.oks = h.fails+1, 0
		h.healthy = h.healthy && h.fails < max(hc.Unhealthy, 1)
		return
	}
	h.oks, h.fails = h.oks+1, 0
	h.healthy = h.healthy || h.oks >= max(hc.Healthy, 1)
}

func (h *host) conn() (*grpc.ClientConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cc == nil {
		cc, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		h.cc = cc
	}
	return h.cc, nil
}

// reset closes the host's connection; the next use dials another.
func (h *host) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cc != nil {
		_ = h.cc.Close()
		h.cc = nil
	}
}

// pick returns the next host round robin among the healthy ones.
func (c *Cluster) pick() *host {
	c.mu.Lock()
	defer c.mu.Unlock()
	var healthy []*host
	for _, h := range c.hosts {
		h.mu.Lock()
		if h.healthy {
			healthy = append(healthy, h)
		}
		h.mu.Unlock()
	}
	if len(healthy) == 0 {
		healthy = c.hosts
	}
	c.next++
	return healthy[c.next%len(healthy)]
}

// Dial is the Cluster's Dialer.
func (c *Cluster) Dial(ctx context.Context) (Stream, error) {
	h := c.pick()
	cc, err := h.conn()
	if err != nil {
		return nil, err
	}
	type result struct {
		s   rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
		err error
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() {
		s, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(sctx)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			cancel()
			return nil, r.err
		}
		return &clusterStream{RateLimitQuotaService_StreamRateLimitQuotasClient: r.s, c: c, h: h, cc: cc, cancel: cancel}, nil
	case <-time.After(c.cfg.ConnectTimeout):
		cancel()
		return nil, errors.New("envoysim: stream not open within connect_timeout")
	}
}

// clusterStream is a stream of a Cluster's host.
type clusterStream struct {
	rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	c      *Cluster
	h      *host
	cc     *grpc.ClientConn
	cancel context.CancelFunc
}

// Ping checks the stream's connection; the answer is the Check's.
func (s *clusterStream) Ping() <-chan struct{} {
	ch := make(chan struct{})
	timeout := s.c.cfg.Keepalive.Timeout + time.Second
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if _, err := healthpb.NewHealthClient(s.cc).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			close(ch)
		}
	}()
	return ch
}

// Abort closes the stream's connection.
func (s *clusterStream) Abort() {
	s.cancel()
	s.h.mu.Lock()
	same := s.h.cc == s.cc
	s.h.mu.Unlock()
	if same {
		s.h.reset()
	}
}
