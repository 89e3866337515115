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

// sendFunc sends ops to one server (Cluster master) and fills results, or
// fails them all. It may be called concurrently.
type sendFunc func(ctx context.Context, ops []limiter.Op, results []limiter.Result) error

// batchOptions tune a batcher.
type batchOptions struct {
	Slots     int           // sends under way at once (default 1)
	MaxOps    int           // ops a send carries at most (default 1)
	Timeout   time.Duration // bounds a send, whatever its callers' deadlines
	Gather    time.Duration // a send's wait for more calls (0: never)
	GatherOps int           // ends that wait (default MaxOps)
	// Group, when set, is shared by a Cluster's masters' batchers, which
	// then gather on the sum of the calls waiting at all of them.
	Group *gatherGroup
}

// gatherGroup sums the calls waiting, on average, at a set of batchers when
// their sends are due. It is safe for concurrent use.
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

// batcher merges concurrent calls bound for one server: at most Slots sends
// are under way, and calls arriving meanwhile leave together in the next.
// Sends run on up to Slots goroutines of the batcher's own, under their
// own context (Timeout), not their callers'. A call that gives up before
// its send starts gets ErrNotSent and is not sent; a failed send fails all
// its calls, and nothing is retried. It is safe for concurrent use
// (docs/design.md, "Merging calls").
type batcher struct {
	send sendFunc
	opts batchOptions
	wake chan struct{} // a slot for a worker to hold; Slots buffered
	stop chan struct{} // closed by close: the workers end

	mu       sync.Mutex
	queue    []*waiter
	queued   int          // ops in queue
	busy     int          // sends under way or gathering
	workers  int          // goroutines started, at most Slots
	avgReady float64      // calls waiting when a send is due, moving average
	lastSend atomic.Int64 // how long the last send that succeeded took, ns
	closed   bool

	sends, ops atomic.Int64 // counted for Stats
	buffers    sync.Pool    // *sendBuffer
}

// Waiter states: waiting, then dropped (gave up unsent), or taken by a send
// and then answered or abandoned (gave up during it: results untouched).
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
	live    func() bool // anyWaits, made once
}

// anyWaits reports whether a member has neither given up nor passed its
// deadline (which a busy machine may let it notice late).
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
	Sends int64 // pipelines of script calls sent
	Ops   int64 // ops they carried
}

func newBatcher(send sendFunc, o batchOptions) *batcher {
	o.Slots, o.MaxOps = max(o.Slots, 1), max(o.MaxOps, 1)
	if o.GatherOps <= 0 || o.GatherOps > o.MaxOps {
		o.GatherOps = o.MaxOps
	}
	b := &batcher{send: send, opts: o, wake: make(chan struct{}, o.Slots), stop: make(chan struct{})}
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

// take decides ops in a send shared with other calls, within ctx.
func (b *batcher) take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	w := &waiter{ctx: ctx, ops: ops, results: results, done: make(chan struct{}), arrived: time.Now()}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return unavailable("take", errClosed)
	}
	b.queue = append(b.queue, w)
	b.queued += len(ops)
	start, spawn := b.busy < b.opts.Slots, false
	if start {
		b.busy++
		spawn = b.workers < b.busy
		if spawn {
			b.workers++
		}
	}
	b.mu.Unlock()
	if spawn {
		go b.work()
	}
	if start {
		b.wake <- struct{}{} // never blocks: no more than Slots slots are held
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

// work runs each slot it is handed until close. A worker keeps its stack,
// grown by go-redis' calls, for the sends that follow.
func (b *batcher) work() {
	for {
		select {
		case <-b.wake:
			b.run()
		case <-b.stop:
			return
		}
	}
}

// run holds one slot and sends what waits until nothing does.
func (b *batcher) run() {
	var ws []*waiter
	for {
		b.gather()
		if ws = b.next(ws[:0]); ws == nil {
			return
		}
		b.sendMerged(ws)
		clear(ws)
	}
}

// gatherFrom is how many calls must wait, on average, when a send is due
// before sends gather.
const gatherFrom = 4

// gather waits Gather for more calls when gatherFrom wait on average (over
// the Group), unless GatherOps ops already wait.
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

// next appends to ws the waiting calls for the next send, keeping the
// slot, or frees the slot and returns nil if nobody waits.
func (b *batcher) next(ws []*waiter) []*waiter {
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
	ws = append(ws, b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	b.queued -= ops
	return ws
}

// sendMerged sends the ops of the calls in ws that still wait as one send.
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
		// It outlives its members, but is not written once all have gone.
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

// tooLate reports whether a call cannot be answered in time, so is better
// not sent: less is left before its deadline than twice the last good send
// took (last), and less than a tenth of the time it had on arrival.
func tooLate(w *waiter, now time.Time, last time.Duration) bool {
	deadline, ok := w.ctx.Deadline()
	if !ok || last <= 0 {
		return false
	}
	left := deadline.Sub(now)
	return left < 2*last && left < deadline.Sub(w.arrived)/10
}

// close fails the calls that wait, and every later call, and ends the
// workers once their sends are done.
func (b *batcher) close() {
	b.mu.Lock()
	ws := b.queue
	if !b.closed {
		close(b.stop)
	}
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
