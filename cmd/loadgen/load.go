package main

import (
	"context"
	"fmt"
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

// generate dials the server, waits until every connection is ready, runs
// the warmup and then the measured phase, and reports the measured one.
// It returns an error only when the server cannot be reached; failed
// calls are counted in the report. Cancelling ctx ends the run early and
// reports what was measured.
func generate(ctx context.Context, c config) (*report, error) {
	clients := make([]rls.RateLimitServiceClient, c.conns)
	for i := range clients {
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", c.addr, err)
		}
		defer conn.Close()
		if err := waitReady(ctx, conn); err != nil {
			return nil, fmt.Errorf("connect to %s: %w", c.addr, err)
		}
		clients[i] = rls.NewRateLimitServiceClient(conn)
	}
	callers := make([]*caller, c.callers)
	for i := range callers {
		callers[i] = newCaller(&c, clients[i%len(clients)], uint64(i))
	}
	var seq atomic.Int64
	if c.warmup > 0 {
		runPhase(ctx, &c, callers, &seq, c.warmup, c.requests)
		for _, cl := range callers {
			cl.st.reset()
		}
	}
	cpu0 := cpuTime()
	took := runPhase(ctx, &c, callers, &seq, c.duration, c.requests)
	cpu := cpuTime() - cpu0
	total := newStats()
	for _, cl := range callers {
		total.merge(cl.st)
	}
	return newReport(&c, total, took, cpu), nil
}

// waitReady connects conn and waits until it is ready. A first failed
// attempt is final: the server is expected to be up already.
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
func runPhase(ctx context.Context, c *config, callers []*caller, seq *atomic.Int64, d time.Duration, limit int64) time.Duration {
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
	cfg     *config
	seq     *atomic.Int64 // next sequential identifier, across phases
	end     time.Time
	limited bool
	left    atomic.Int64 // requests left to send, when limited
}

// next returns the next identifier to use.
func (p *phase) next(rng *rand.Rand) int64 {
	if p.cfg.pick == pickSeq {
		return p.cfg.offset + (p.seq.Add(1)-1)%p.cfg.keys
	}
	return p.cfg.offset + rng.Int64N(p.cfg.keys)
}

// caller sends one request at a time. Its request is reused: the client
// has marshalled it by the time a call returns.
type caller struct {
	cfg     *config
	client  rls.RateLimitServiceClient
	rng     *rand.Rand
	req     *rls.RateLimitRequest
	entries []*common.RateLimitDescriptor_Entry // one per descriptor
	buf     []byte
	st      *stats
}

func newCaller(c *config, client rls.RateLimitServiceClient, id uint64) *caller {
	cl := &caller{
		cfg:    c,
		client: client,
		rng:    rand.New(rand.NewPCG(c.seed, id)),
		req:    &rls.RateLimitRequest{Domain: c.domain},
		st:     newStats(),
	}
	for i := range c.descriptors {
		e := &common.RateLimitDescriptor_Entry{Key: c.entryKeys[i%len(c.entryKeys)]}
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
			cl.buf = strconv.AppendInt(append(cl.buf[:0], cl.cfg.valuePrefix...), p.next(cl.rng), 10)
			e.Value = string(cl.buf)
		}
		cl.call(ctx)
	}
}

// call sends the request once and records the outcome.
func (cl *caller) call(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, cl.cfg.timeout)
	start := time.Now()
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
