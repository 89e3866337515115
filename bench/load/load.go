// Package load drives an envoy.service.ratelimit.v3 RateLimitService over
// gRPC and measures decisions per second, answers, errors, latency
// percentiles and the CPU time it used itself.
//
// Closed loop (the default): N callers share M connections round-robin;
// each caller has one request in flight, so a slow server slows the load.
// Open loop (Config.Rate): requests arrive at a fixed mean rate, as a
// Poisson process, whatever the server does; each is sent at its intended
// time by an idle sender (a new one when none is idle), and its latency
// runs from that intended time, so that a server's stall counts in full
// for every request it delayed (no coordinated omission). Each request
// carries one or more descriptors of one entry whose values are drawn from
// a keyspace, uniformly or in sequence. bench/loadgen is its command line;
// bench/rls runs it between CPU readings of the server and Redis.
package load

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// connectTimeout bounds the wait for each connection to become ready.
const connectTimeout = 5 * time.Second

// Ways to draw identifiers.
const (
	PickUniform = "uniform" // independent uniform draws from the keyspace
	PickSeq     = "seq"     // Offset, Offset+1, ... wrapping at Keys
)

// Config is what a Generator sends, and how.
type Config struct {
	Addr        string        // gRPC address of the server
	Callers     int           // concurrent callers, each with one request in flight (closed loop)
	Rate        float64       // requests a second, Poisson arrivals (open loop); 0: closed loop
	Conns       int           // gRPC connections the callers share round-robin
	Requests    int64         // requests per phase at most (0: only the duration bounds it)
	Timeout     time.Duration // deadline of each call
	Keys        int64         // identifiers in the keyspace
	Offset      int64         // first identifier
	Pick        string        // PickUniform or PickSeq
	Descriptors int           // descriptors per request, each with its own identifier
	Domain      string        // request domain
	EntryKeys   []string      // descriptor i uses EntryKeys[i % len]
	ValuePrefix string        // prefix of every identifier value
	Seed        uint64        // seed of the uniform draws
}

// ErrConfig is wrapped by Dial's error for a Config it cannot run.
var ErrConfig = errors.New("invalid load config")

func (c *Config) check() error {
	switch {
	case c.Callers < 1 && c.Rate == 0, c.Conns < 1, c.Keys < 1, c.Descriptors < 1, len(c.EntryKeys) == 0:
		return fmt.Errorf("%w: callers (or a rate), conns, keys, descriptors and entry keys must be at least 1", ErrConfig)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("%w: the rate must be a positive number of requests a second (0: closed loop)", ErrConfig)
	case c.Timeout <= 0:
		return fmt.Errorf("%w: the call timeout must be positive", ErrConfig)
	case c.Pick != PickUniform && c.Pick != PickSeq:
		return fmt.Errorf("%w: pick %q is neither %s nor %s", ErrConfig, c.Pick, PickUniform, PickSeq)
	case c.Requests < 0, c.Offset < 0:
		return fmt.Errorf("%w: requests and offset must not be negative", ErrConfig)
	}
	return nil
}

// Generator holds the connections and callers of one load. Its phases
// (Run) happen one after the other; it is not safe for concurrent use.
// Sequential identifiers continue from one phase to the next.
type Generator struct {
	cfg     Config
	conns   []*grpc.ClientConn
	clients []rls.RateLimitServiceClient
	callers []*caller
	seq     atomic.Int64
	phases  uint64 // open-loop phases run, for their arrival schedules
}

// Dial connects to the server and waits until every connection is ready.
// A first failed attempt is final: the server is expected to be up.
func Dial(ctx context.Context, cfg Config) (*Generator, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg}
	clients := make([]rls.RateLimitServiceClient, cfg.Conns)
	for i := range clients {
		conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("dial %s: %w", cfg.Addr, err)
		}
		g.conns = append(g.conns, conn)
		if err := waitReady(ctx, conn); err != nil {
			g.Close()
			return nil, fmt.Errorf("connect to %s: %w", cfg.Addr, err)
		}
		clients[i] = rls.NewRateLimitServiceClient(conn)
	}
	g.clients = clients
	if cfg.Rate > 0 {
		return g, nil // senders are made as arrivals need them
	}
	g.callers = make([]*caller, cfg.Callers)
	for i := range g.callers {
		g.callers[i] = newCaller(&g.cfg, clients[i%len(clients)], uint64(i))
	}
	return g, nil
}

// Close closes the connections.
func (g *Generator) Close() {
	for _, c := range g.conns {
		_ = c.Close()
	}
}

// Run runs one phase: every caller sends until d has passed, Requests
// requests have been sent (if set), or ctx is done; calls in flight at the
// end finish and count. It returns the phase's report: failed calls are
// counted in it, not returned as errors. Cancelling ctx ends the phase
// early and reports what was measured.
func (g *Generator) Run(ctx context.Context, d time.Duration) *Report {
	if g.cfg.Rate > 0 {
		g.phases++
		cpu0 := cpuTime()
		total, took, open := g.runOpen(ctx, d, g.phases)
		rep := newReport(&g.cfg, total, took, cpuTime()-cpu0)
		rep.Open = open
		return rep
	}
	for _, cl := range g.callers {
		cl.st.reset()
	}
	cpu0 := cpuTime()
	took := runPhase(ctx, &g.cfg, g.callers, &g.seq, d, g.cfg.Requests)
	cpu := cpuTime() - cpu0
	total := newStats()
	for _, cl := range g.callers {
		total.merge(cl.st)
	}
	return newReport(&g.cfg, total, took, cpu)
}

// waitReady connects conn and waits until it is ready.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connection failed (state %s)", s)
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("not ready after %v (state %s)", connectTimeout, s)
		}
	}
}

// runPhase runs every caller until d has passed, limit requests have been
// sent (if limit > 0), or ctx is done, and returns the time it took.
// Calls in flight at the end finish and count.
func runPhase(ctx context.Context, c *Config, callers []*caller, seq *atomic.Int64, d time.Duration, limit int64) time.Duration {
	p := &phase{cfg: c, seq: seq, end: time.Now().Add(d), limited: limit > 0}
	p.left.Store(limit)
	start := time.Now()
	var wg sync.WaitGroup
	for _, cl := range callers {
		wg.Go(func() { cl.loop(ctx, p) })
	}
	wg.Wait()
	return time.Since(start)
}

// phase is what the callers of one phase share.
type phase struct {
	cfg     *Config
	seq     *atomic.Int64 // next sequential identifier, across phases
	end     time.Time
	limited bool
	left    atomic.Int64 // requests left to send, when limited
}

// next returns the next identifier to use.
func (p *phase) next(rng *rand.Rand) int64 {
	if p.cfg.Pick == PickSeq {
		return p.cfg.Offset + (p.seq.Add(1)-1)%p.cfg.Keys
	}
	return p.cfg.Offset + rng.Int64N(p.cfg.Keys)
}

// caller sends one request at a time. Its request is reused: the client
// has marshalled it by the time a call returns.
type caller struct {
	cfg     *Config
	client  rls.RateLimitServiceClient
	rng     *rand.Rand
	req     *rls.RateLimitRequest
	entries []*common.RateLimitDescriptor_Entry // one per descriptor
	buf     []byte
	st      *stats
}

func newCaller(c *Config, client rls.RateLimitServiceClient, id uint64) *caller {
	cl := &caller{
		cfg:    c,
		client: client,
		rng:    rand.New(rand.NewPCG(c.Seed, id)),
		req:    &rls.RateLimitRequest{Domain: c.Domain},
		st:     newStats(),
	}
	for i := range c.Descriptors {
		e := &common.RateLimitDescriptor_Entry{Key: c.EntryKeys[i%len(c.EntryKeys)]}
		cl.entries = append(cl.entries, e)
		cl.req.Descriptors = append(cl.req.Descriptors, &common.RateLimitDescriptor{
			Entries: []*common.RateLimitDescriptor_Entry{e},
		})
	}
	return cl
}

func (cl *caller) loop(ctx context.Context, p *phase) {
	for ctx.Err() == nil && time.Now().Before(p.end) {
		if p.limited && p.left.Add(-1) < 0 {
			return
		}
		for _, e := range cl.entries {
			cl.set(e, p.next(cl.rng))
		}
		cl.call(ctx, time.Now())
	}
}

// set gives entry e identifier id.
func (cl *caller) set(e *common.RateLimitDescriptor_Entry, id int64) {
	cl.buf = strconv.AppendInt(append(cl.buf[:0], cl.cfg.ValuePrefix...), id, 10)
	e.Value = string(cl.buf)
}

// call sends the request once and records the outcome, its latency from
// start (when it was sent, or meant to be).
func (cl *caller) call(ctx context.Context, start time.Time) {
	cctx, cancel := context.WithDeadline(ctx, start.Add(cl.cfg.Timeout))
	resp, err := cl.client.ShouldRateLimit(cctx, cl.req)
	took := time.Since(start)
	cancel()
	cl.st.hist.record(took)
	switch {
	case err != nil:
		cl.st.fail(status.Code(err).String(), err)
	case resp.GetOverallCode() == rls.RateLimitResponse_OVER_LIMIT:
		cl.st.over++
	case resp.GetOverallCode() == rls.RateLimitResponse_OK:
		cl.st.ok++
	default:
		cl.st.fail("UNKNOWN_CODE", fmt.Errorf("overall code %s", resp.GetOverallCode()))
	}
}
