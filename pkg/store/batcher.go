package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrNotSent marks a call that gave up (its context ended) before its ops
// were sent: nothing was charged. It wraps limiter.ErrUnavailable.
var ErrNotSent = fmt.Errorf("not sent: %w", limiter.ErrUnavailable)

// sendFunc sends ops to one destination (a server, or a Cluster node) and
// fills results, or returns an error for all of them. It may be called
// concurrently.
type sendFunc func(ctx context.Context, ops []limiter.Op, results []limiter.Result) error

// batchOptions tune a batcher.
type batchOptions struct {
	// Slots is how many sends may be under way at once (default 1).
	Slots int
	// MaxOps caps a send's ops (default 1).
	MaxOps int
	// Timeout bounds a send, whatever its callers' deadlines.
	Timeout time.Duration
	// Gather is how long a send waits for more calls when calls have been
	// arriving together (0: never). See batcher.
	Gather time.Duration
	// GatherOps ends the wait early once this many ops wait (default
	// MaxOps).
	GatherOps int
	// Group, when set, is shared by the batchers of one store's
	// destinations (a Cluster's masters): they gather when the calls
	// waiting at all of them add up to gatherFrom, as a lone batcher does
	// when its own do.
	Group *gatherGroup
}

// gatherGroup adds up how many calls wait, on average, when sends are due
// at each of a set of batchers. Each batcher of a Cluster's master sees
// only its share of the calls, fewer than gatherFrom at any load a single
// server would gather at; the sum is what a single server's batcher
// would see. It is safe for concurrent use.
type gatherGroup struct {
	mu   sync.Mutex
	avgs map[*batcher]float64
}

// update records b's average and returns the sum over the group.
func (g *gatherGroup) update(b *batcher, avg float64) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.avgs == nil {
		g.avgs = make(map[*batcher]float64)
	}
	g.avgs[b] = avg
	sum := 0.0
	for _, v := range g.avgs {
		sum += v
	}
	return sum
}

// batcher merges concurrent calls bound for one destination, so that the
// ops of many requests leave in a few script calls: at most Slots sends
// are under way at once, and calls that arrive meanwhile wait and leave
// together in the next send. A call that finds a slot free is sent at
// once, on a goroutine of its own. When sends are due with several calls
// already waiting (gatherFrom on average: many callers, a busy machine),
// a send first waits Gather for more, so that Redis pays one script call
// for many decisions and its CPU goes further. A lone caller, or a few,
// never wait.
//
// Sends run under a context of their own that ends Timeout after the
// send starts: callers wait no longer than their contexts allow, but a
// send whose callers all gave up goes on, so that what it started (a
// dial, a handshake) completes for the calls that follow; go-redis dials
// and authenticates under the context of the call that needs the
// connection.
//
// A waiting call whose context ends before its send starts is dropped: it
// gets ErrNotSent and nothing of it is sent; so is one whose deadline is
// too near for a send to answer it (tooLate). Once its send has started, it
// gets its context's error and its ops may or may not be decided; but a
// send whose calls have all given up by the time it would be written
// (waiting for a connection) is not written (see onceCmd). A send
// that fails fails every call in it; nothing is retried. It is safe for
// concurrent use.
type batcher struct {
	send sendFunc
	opts batchOptions

	mu       sync.Mutex
	queue    []*waiter
	queued   int          // ops in queue
	busy     int          // sends under way or gathering
	avgReady float64      // calls waiting when a send is due, moving average
	lastSend atomic.Int64 // how long the last send that succeeded took, ns
	closed   bool

	sends, ops atomic.Int64 // counted for Stats
	buffers    sync.Pool    // *sendBuffer
}

// Waiter states: waiting, then either dropped (its call gave up first), or
// taken by a send and then either answered or abandoned (its call gave up
// during the send, and the send must not touch its results).
const (
	waiting int32 = iota
	dropped
	taken
	answered
	abandoned
)

// waiter is one call waiting for a send.
type waiter struct {
	ctx     context.Context
	ops     []limiter.Op
	results []limiter.Result
	state   atomic.Int32
	err     error
	done    chan struct{}
	arrived time.Time
}

// sendBuffer holds the merged ops of one send.
type sendBuffer struct {
	ops     []limiter.Op
	results []limiter.Result
	members []*waiter
	live    func() bool // reports whether a member still waits: see onceCmd
}

// anyWaits reports whether a member of the send still waits for it: one
// that has neither given up nor passed its deadline (which a busy machine
// may let its goroutine notice late).
func (buf *sendBuffer) anyWaits() bool {
	now := time.Now()
	for _, w := range buf.members {
		if w.state.Load() != taken || w.ctx.Err() != nil {
			continue
		}
		if d, ok := w.ctx.Deadline(); !ok || now.Before(d) {
			return true
		}
	}
	return false
}

// BatchStats count what a store's batching did.
type BatchStats struct {
	// Sends is the number of sends (script calls' pipelines) made.
	Sends int64
	// Ops is the number of ops they carried.
	Ops int64
}

func newBatcher(send sendFunc, o batchOptions) *batcher {
	o.Slots, o.MaxOps = max(o.Slots, 1), max(o.MaxOps, 1)
	if o.GatherOps <= 0 || o.GatherOps > o.MaxOps {
		o.GatherOps = o.MaxOps
	}
	b := &batcher{send: send, opts: o}
	b.buffers.New = func() any {
		buf := new(sendBuffer)
		buf.live = buf.anyWaits
		return buf
	}
	return b
}

// Stats returns the sends and ops so far.
func (b *batcher) Stats() BatchStats {
	return BatchStats{Sends: b.sends.Load(), Ops: b.ops.Load()}
}

// take decides ops, through a send shared with other calls, waiting no
// longer than ctx allows.
func (b *batcher) take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	w := &waiter{ctx: ctx, ops: ops, results: results, done: make(chan struct{}), arrived: time.Now()}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return unavailable("take", errClosed)
	}
	b.queue = append(b.queue, w)
	b.queued += len(ops)
	start := b.busy < b.opts.Slots
	if start {
		b.busy++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		if w.state.CompareAndSwap(waiting, dropped) {
			return unavailable("take", fmt.Errorf("%w: %w", ErrNotSent, ctx.Err()))
		}
		if w.state.CompareAndSwap(taken, abandoned) {
			return unavailable("take", ctx.Err())
		}
		<-w.done // answered just now
		return w.err
	}
}

// run sends what waits, gathering first when calls arrive together, until
// nothing waits; it holds one slot.
func (b *batcher) run() {
	for {
		b.gather()
		ws := b.next()
		if ws == nil {
			return
		}
		b.sendMerged(ws)
	}
}

// gatherFrom is how many calls must, on average, be waiting already when
// a send is due before sends gather: that many arrive while a call is at
// Redis only when callers are many and the machine is busy, where Redis'
// CPU is better spent on fewer, larger calls; below it, waiting would only
// add latency. (What waits when a send is due does not depend on the
// gathering itself, so it does not feed itself.)
const gatherFrom = 4

// gather waits up to Gather for more calls when sends are due with
// gatherFrom calls or more already waiting, on average (at the whole
// Group's batchers, when it has one), unless GatherOps ops already wait.
func (b *batcher) gather() {
	b.mu.Lock()
	b.avgReady += (float64(len(b.queue)) - b.avgReady) / 16
	ready, queued := b.avgReady, b.queued
	b.mu.Unlock()
	if b.opts.Group != nil {
		ready = b.opts.Group.update(b, ready)
	}
	if b.opts.Gather > 0 && ready >= gatherFrom && queued < b.opts.GatherOps {
		time.Sleep(b.opts.Gather)
	}
}

// next takes the waiting calls for the next send, keeping the slot, or
// frees the slot if nobody waits.
func (b *batcher) next() []*waiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.busy--
		return nil
	}
	n, ops := 0, 0
	for n < len(b.queue) && (n == 0 || ops+len(b.queue[n].ops) <= b.opts.MaxOps) {
		ops += len(b.queue[n].ops)
		n++
	}
	ws := make([]*waiter, n)
	copy(ws, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	b.queued -= ops
	return ws
}

// sendMerged sends the ops of the calls in ws that still wait, as one send,
// and tells each its outcome.
func (b *batcher) sendMerged(ws []*waiter) {
	buf := b.buffers.Get().(*sendBuffer)
	buf.ops, buf.members = buf.ops[:0], buf.members[:0]
	last := time.Duration(b.lastSend.Load())
	now := time.Now()
	for _, w := range ws {
		if w.ctx.Err() != nil || !w.state.CompareAndSwap(waiting, taken) {
			continue // gave up: not sent
		}
		if tooLate(w, now, last) {
			w.state.Store(answered)
			w.err = unavailable("take", fmt.Errorf("%w: its deadline comes before a send could answer", ErrNotSent))
			close(w.done)
			continue
		}
		buf.members = append(buf.members, w)
		buf.ops = append(buf.ops, w.ops...)
	}
	if len(buf.members) > 0 {
		if cap(buf.results) < len(buf.ops) {
			buf.results = make([]limiter.Result, len(buf.ops))
		}
		res := buf.results[:len(buf.ops)]
		b.sends.Add(1)
		b.ops.Add(int64(len(buf.ops)))
		// The send outlives any one member, but is not written once they
		// have all gone (withLive: while it waits for a connection).
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
		start := time.Now()
		err := b.send(withLive(ctx, buf.live), buf.ops, res)
		cancel()
		if err == nil {
			b.lastSend.Store(int64(time.Since(start)))
		}
		off := 0
		for _, w := range buf.members {
			if w.state.CompareAndSwap(taken, answered) {
				if err == nil {
					copy(w.results, res[off:off+len(w.ops)])
				}
				w.err = err
				close(w.done)
			}
			off += len(w.ops)
		}
	}
	clear(buf.members)
	clear(buf.ops)
	b.buffers.Put(buf)
}

// tooLate reports whether a call taken for a send at now cannot be
// answered in time: less is left before its deadline than twice the last
// send that succeeded took (last), and less than a tenth of the time it
// had when it arrived. Such a call (one that waited long in the queue,
// behind sends stuck on a dial) would be answered Unavailable by its
// deadline while its ops may still run; it is answered ErrNotSent at once
// instead, and nothing of it is sent. The tenth bounds what a slow send
// (a stall that ended) makes the rule drop: a call with a tenth of its
// time left is always sent.
func tooLate(w *waiter, now time.Time, last time.Duration) bool {
	deadline, ok := w.ctx.Deadline()
	if !ok || last <= 0 {
		return false
	}
	left := deadline.Sub(now)
	return left < 2*last && left < deadline.Sub(w.arrived)/10
}

// close fails the calls that wait, and every later call.
func (b *batcher) close() {
	b.mu.Lock()
	ws := b.queue
	b.queue, b.queued, b.closed = nil, 0, true
	b.mu.Unlock()
	for _, w := range ws {
		if w.state.CompareAndSwap(waiting, answered) {
			w.err = unavailable("take", errClosed)
			close(w.done)
		}
	}
}

var errClosed = errors.New("store closed")
