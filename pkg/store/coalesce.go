package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// CoalesceOptions configure a Coalescer.
type CoalesceOptions struct {
	// InFlight is how many batches may be at the store at once (default 4).
	InFlight int
	// MaxOps caps a batch's ops (default 512).
	MaxOps int
	// Timeout bounds one batch at the store, whatever its callers'
	// deadlines (default 1s).
	Timeout time.Duration
}

// Coalescer is a limiter.Store that merges concurrent Take calls into
// batches for the store beneath it: one pipeline carries the ops of many
// requests, so that a loaded server makes few round trips, and batches
// grow with the load. With a free slot and nothing waiting, a call goes to
// the store at once, adding no latency.
//
// Semantics are the store's: ops are independent and run in order, so a
// merged batch decides each op as separate calls would. A batch that fails
// fails every call in it, and nothing is retried. A caller whose context
// ends first gets its context's error, but its ops may still be decided
// (and counted) by the batch already under way, as with any timeout.
type Coalescer struct {
	store limiter.Store
	opts  CoalesceOptions
	slots chan struct{}

	mu      sync.Mutex
	pending *batch // the batch that is gathering ops, if any
}

var _ limiter.Store = (*Coalescer)(nil)

type batch struct {
	ops     []limiter.Op
	results []limiter.Result
	err     error
	done    chan struct{}
}

// NewCoalescer wraps store.
func NewCoalescer(store limiter.Store, opts CoalesceOptions) *Coalescer {
	if opts.InFlight <= 0 {
		opts.InFlight = 4
	}
	if opts.MaxOps <= 0 {
		opts.MaxOps = 512
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	return &Coalescer{store: store, opts: opts, slots: make(chan struct{}, opts.InFlight)}
}

// Take adds ops to the gathering batch, or starts one and sends it when a
// slot is free, and waits for the batch's answer.
func (c *Coalescer) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if len(ops) == 0 {
		return nil
	}
	b, off, leader := c.join(ops)
	if leader {
		if err := c.send(ctx, b); err != nil {
			return err
		}
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return unavailable("coalesced take", ctx.Err())
	}
	if b.err != nil {
		return b.err
	}
	copy(results, b.results[off:off+len(ops)])
	return nil
}

// join appends ops to the gathering batch, starting a new one when there
// is none or it is full. The caller that starts a batch leads it.
func (c *Coalescer) join(ops []limiter.Op) (b *batch, off int, leader bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b = c.pending
	if b == nil || len(b.ops)+len(ops) > c.opts.MaxOps {
		b = &batch{done: make(chan struct{}), ops: make([]limiter.Op, 0, max(len(ops), 16))}
		c.pending, leader = b, true
	}
	off = len(b.ops)
	b.ops = append(b.ops, ops...)
	return b, off, leader
}

// send waits for a slot, closes the batch to newcomers and sends it,
// bounded by the Coalescer's timeout rather than the leader's context, so
// that a leader who goes away does not fail the others. While the leader
// waits for a slot, other callers join its batch.
func (c *Coalescer) send(ctx context.Context, b *batch) error {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		// Nobody else can send this batch: fail it for every member.
		c.detach(b)
		b.err = unavailable("coalesced take", ctx.Err())
		close(b.done)
		return b.err
	}
	c.detach(b)
	defer func() { <-c.slots }()
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.Timeout)
	defer cancel()
	b.results = make([]limiter.Result, len(b.ops))
	b.err = c.store.Take(bctx, b.ops, b.results)
	close(b.done)
	return nil
}

func (c *Coalescer) detach(b *batch) {
	c.mu.Lock()
	if c.pending == b {
		c.pending = nil
	}
	c.mu.Unlock()
}

// Ping forwards to the store.
func (c *Coalescer) Ping(ctx context.Context) error { return c.store.Ping(ctx) }

// Close closes the store.
func (c *Coalescer) Close() error { return c.store.Close() }

var _ limiter.AtomicStore = (*Coalescer)(nil)

// TakeAll passes an all-or-nothing call straight to the store: it is one
// script call already, and merging would tie its fate to other requests.
func (c *Coalescer) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	all, ok := c.store.(limiter.AtomicStore)
	if !ok {
		return fmt.Errorf("coalescer: %T: %w", c.store, limiter.ErrNotAtomic)
	}
	return all.TakeAll(ctx, ops, results)
}
