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

// batcher merges concurrent calls bound for one destination, so that the
// ops of many requests leave in a few script calls: at most slots sends
// are under way at once, and calls that arrive meanwhile wait and leave
// together in the next send. A call that finds a slot free and nobody
// waiting is sent at once, by its own goroutine, adding no latency; under
// load the sends grow with the load, and Redis pays one script call for
// many decisions.
//
// A waiting call whose context ends before its send starts is dropped: it
// gets ErrNotSent and nothing of it is sent. Once its send has started, it
// gets its context's error and its ops may or may not be decided. A send
// that fails fails every call in it; nothing is retried. It is safe for
// concurrent use.
type batcher struct {
	send     sendFunc
	slots    int
	maxOps   int           // ops per send, at most
	timeout  time.Duration // bound on a merged send without any deadline
	detached bool          // every send runs on its own goroutine, see newDetachedBatcher

	mu     sync.Mutex
	queue  []*waiter
	busy   int // sends under way
	closed bool

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
}

// sendBuffer holds the merged ops of one send.
type sendBuffer struct {
	ops     []limiter.Op
	results []limiter.Result
	members []*waiter
}

// BatchStats count what a store's batching did.
type BatchStats struct {
	// Sends is the number of sends (script calls' pipelines) made.
	Sends int64
	// Ops is the number of ops they carried.
	Ops int64
}

func newBatcher(send sendFunc, slots, maxOps int, timeout time.Duration) *batcher {
	b := &batcher{send: send, slots: max(slots, 1), maxOps: max(maxOps, 1), timeout: timeout}
	b.buffers.New = func() any { return new(sendBuffer) }
	return b
}

// newDetachedBatcher returns a batcher whose sends all run on goroutines of
// their own, under a context of their own that ends timeout after the send
// starts: callers wait no longer than their contexts allow, but a send
// whose callers all gave up goes on, so that what it started (a dial, a
// handshake) completes for the calls that follow. For clients that dial
// and authenticate under the context of the call that needs the
// connection, as go-redis does.
func newDetachedBatcher(send sendFunc, slots, maxOps int, timeout time.Duration) *batcher {
	b := newBatcher(send, slots, maxOps, timeout)
	b.detached = true
	return b
}

// Stats returns the sends and ops so far.
func (b *batcher) Stats() BatchStats {
	return BatchStats{Sends: b.sends.Load(), Ops: b.ops.Load()}
}

// take decides ops, through a send of their own or one shared with other
// calls, waiting no longer than ctx allows.
func (b *batcher) take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return unavailable("take", errClosed)
	}
	if b.busy < b.slots && len(b.queue) == 0 && !b.detached {
		b.busy++
		b.mu.Unlock()
		b.sends.Add(1)
		b.ops.Add(int64(len(ops)))
		err := b.send(ctx, ops, results)
		if next := b.next(); next != nil {
			go b.run(next)
		}
		return err
	}
	w := &waiter{ctx: ctx, ops: ops, results: results, done: make(chan struct{})}
	b.queue = append(b.queue, w)
	var ws []*waiter
	if b.busy < b.slots {
		b.busy++
		ws = b.takeLocked()
	}
	b.mu.Unlock()
	if ws != nil {
		go b.run(ws)
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

// next takes the waiting calls for the next send, keeping the slot, or
// frees the slot if nobody waits.
func (b *batcher) next() []*waiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.busy--
		return nil
	}
	return b.takeLocked()
}

// takeLocked takes the calls for one send from the head of the queue,
// which is not empty.
func (b *batcher) takeLocked() []*waiter {
	n, ops := 0, 0
	for n < len(b.queue) && (n == 0 || ops+len(b.queue[n].ops) <= b.maxOps) {
		ops += len(b.queue[n].ops)
		n++
	}
	ws := make([]*waiter, n)
	copy(ws, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return ws
}

// run sends ws, then whatever waits, until nothing does.
func (b *batcher) run(ws []*waiter) {
	for ws != nil {
		b.sendMerged(ws)
		ws = b.next()
	}
}

// sendMerged sends the ops of the calls in ws that still wait, as one send,
// and tells each its outcome.
func (b *batcher) sendMerged(ws []*waiter) {
	buf := b.buffers.Get().(*sendBuffer)
	buf.ops, buf.members = buf.ops[:0], buf.members[:0]
	var deadline time.Time
	for _, w := range ws {
		if w.ctx.Err() != nil || !w.state.CompareAndSwap(waiting, taken) {
			continue // gave up: not sent
		}
		buf.members = append(buf.members, w)
		buf.ops = append(buf.ops, w.ops...)
		d, ok := w.ctx.Deadline()
		if !ok || b.detached {
			d = time.Now().Add(b.timeout)
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	if len(buf.members) > 0 {
		if cap(buf.results) < len(buf.ops) {
			buf.results = make([]limiter.Result, len(buf.ops))
		}
		res := buf.results[:len(buf.ops)]
		b.sends.Add(1)
		b.ops.Add(int64(len(buf.ops)))
		// The send outlives any one member: it ends when the last member
		// stops waiting.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := b.send(ctx, buf.ops, res)
		cancel()
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

// close fails the calls that wait, and every later call.
func (b *batcher) close() {
	b.mu.Lock()
	ws := b.queue
	b.queue, b.closed = nil, true
	b.mu.Unlock()
	for _, w := range ws {
		if w.state.CompareAndSwap(waiting, answered) {
			w.err = unavailable("take", errClosed)
			close(w.done)
		}
	}
}

var errClosed = errors.New("store closed")
