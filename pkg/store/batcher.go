package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/pkg/clock"
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
	Slots   int           // sends under way at once (default 1)
	MaxOps  int           // ops a send carries at most (default 1)
	Timeout time.Duration // bounds a send, whatever its callers' deadlines
	// Gather is how long a call may wait for company before its send
	// leaves (0: never); see until.
	Gather    time.Duration
	GatherOps int // ops waiting that end that wait (default MaxOps)
	// Sum, when set, is shared by a Cluster's masters' batchers, which
	// then gather on the sum of the calls waiting at all of them.
	Sum   *gatherSum
	Clock batchClock // nil: clock.Wall
}

// batchClock is the time a batcher reads and waits on.
type batchClock interface {
	Now() time.Time
	NewTimer(d time.Duration) clock.Timer
}

// gatherSum sums the calls waiting, on average, at a set of batchers when
// their sends are due. It is safe for concurrent use.
type gatherSum struct {
	mu   sync.Mutex
	avgs map[*batcher]float64
}

func (g *gatherSum) update(b *batcher, avg float64) float64 {
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
	send  sendFunc
	opts  batchOptions
	clock batchClock
	wake  chan struct{} // a slot for a worker to hold; Slots buffered
	stop  chan struct{} // closed by close: the workers end
	kick  chan struct{} // ends a gathering send's wait; 1 buffered

	mu        sync.Mutex
	queue     []*waiter
	queued    int          // ops in queue
	busy      int          // slots held: sends gathering, under way or answering
	workers   int          // goroutines started, at most Slots
	avgReady  float64      // calls waiting when a send is due, moving average
	lastSend  atomic.Int64 // how long the last send that succeeded took, ns
	closed    bool
	gathering bool      // a send waits for company (one at most)
	gatherEnd time.Time // until then
	kicked    bool      // and was told to stop waiting
	company             // the rate calls arrive at while sends are active

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
	arrived time.Time // on the batcher's clock
	// patience is the longest its send may wait for company, from
	// arrived: a tenth of the time it had (0: no deadline, no bound).
	patience time.Duration
}

// patienceShare is the share of a call's time, from its arrival to its
// deadline, that its send may spend waiting for company.
const patienceShare = 10

// company estimates the calls a send can expect if it waits: the rate at
// which calls arrive while sends are active (which gates waiting), and in
// the second half of waits (which decides it; docs/redis.md, "Batching
// and the gather window", says why). It is guarded by its batcher's mu.
type company struct {
	active int       // sends gathering or under way
	since  time.Time // when active last rose from 0
	all    rateOf    // calls arriving while sends are active
	late   rateOf    // calls arriving in the second half of waits
	lateAt time.Time // when the current wait's second half starts
	skips  int       // waits skipped on late's word since the last probe
}

// probeEvery is how often a send waits while late says it should not.
const probeEvery = 16

// rateOf averages calls over time into a rate, a fold at a time.
type rateOf struct {
	seen  int           // calls since the last fold
	span  time.Duration // time watched since the last fold
	rate  float64       // calls a second: a moving average of folds
	known bool          // a fold was made
}

// A fold averages what was seen over at least rateSpan of watched time,
// or rateArrivals calls, whichever comes first, into the rate, with
// weight 1/2 (the first fold is the rate).
const (
	rateSpan     = 20 * time.Millisecond
	rateArrivals = 16
)

// count adds a call, folding if enough were seen.
func (r *rateOf) count() {
	r.seen++
	if r.seen >= rateArrivals {
		r.fold()
	}
}

// watch adds d of watched time, folding if enough was.
func (r *rateOf) watch(d time.Duration) {
	r.span += d
	if r.span >= rateSpan {
		r.fold()
	}
}

// fold averages what was seen since the last fold into rate.
func (r *rateOf) fold() {
	if r.span <= 0 {
		return
	}
	sample := float64(r.seen) / r.span.Seconds()
	if r.known {
		r.rate += (sample - r.rate) / 2
	} else {
		r.rate, r.known = sample, true
	}
	r.seen, r.span = 0, 0
}

func (r *rateOf) expected(d time.Duration) float64 { return r.rate * d.Seconds() }

func (c *company) arrive(now time.Time, gathering bool) {
	if c.active == 0 {
		return
	}
	if c.all.seen+1 >= rateArrivals {
		c.all.watch(now.Sub(c.since))
		c.since = now
	}
	c.all.count()
	if gathering && !now.Before(c.lateAt) {
		c.late.count()
	}
}

func (c *company) add(delta int, now time.Time) {
	if c.active == 0 {
		c.since = now
	}
	c.active += delta
	if c.active == 0 {
		c.all.watch(now.Sub(c.since))
	}
}

// waited records a wait that ended at now, whose second half started at
// c.lateAt.
func (c *company) waited(now time.Time) {
	if now.After(c.lateAt) {
		c.late.watch(now.Sub(c.lateAt))
	}
}

// expectLate returns the calls expected in d, late in a wait: late's
// rate, or all's until late knows.
func (c *company) expectLate(d time.Duration) float64 {
	if !c.late.known {
		return c.all.expected(d)
	}
	return c.late.expected(d)
}

// worth reports whether a send should wait d for company: all expects
// firstCompany calls in it, and late does too, or it is time to probe.
func (c *company) worth(d time.Duration) bool {
	if c.all.expected(d) < firstCompany {
		return false
	}
	if c.expectLate(d) >= firstCompany {
		return true
	}
	c.skips++
	if c.skips >= probeEvery {
		c.skips = 0
		return true
	}
	return false
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
	b := &batcher{send: send, opts: o, clock: o.Clock, wake: make(chan struct{}, o.Slots), stop: make(chan struct{}),
		kick: make(chan struct{}, 1)}
	if b.clock == nil {
		b.clock = clock.Wall{}
	}
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
	now := b.clock.Now()
	w := &waiter{ctx: ctx, ops: ops, results: results, done: make(chan struct{}), arrived: now}
	if d, ok := ctx.Deadline(); ok {
		w.patience = time.Until(d) / patienceShare
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return unavailable("take", errClosed)
	}
	b.queue = append(b.queue, w)
	b.queued += len(ops)
	b.arrive(now, b.gathering)
	start, spawn := false, false
	switch {
	case b.gathering:
		// The send that gathers takes it; it leaves now if the call
		// made it full, or if no more company is expected before its
		// window ends.
		if b.queued >= b.opts.GatherOps || b.expectLate(b.gatherEnd.Sub(now)) < lastCompany {
			b.kicked = true
			select {
			case b.kick <- struct{}{}:
			default:
			}
		}
	case b.busy < b.opts.Slots:
		start = true
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
// grown by go-redis' calls, and its timer, for the sends that follow.
func (b *batcher) work() {
	var t clock.Timer
	for {
		select {
		case <-b.wake:
			b.run(&t)
		case <-b.stop:
			return
		}
	}
}

// run holds one slot and sends what waits until nothing does, or until
// another send gathers what waits.
func (b *batcher) run(t *clock.Timer) {
	var ws []*waiter
	for {
		active, ok := b.gather(t)
		if !ok {
			return
		}
		if ws = b.next(ws[:0], active); ws == nil {
			return
		}
		b.sendMerged(ws)
		clear(ws)
	}
}

// gatherFrom is how many calls must wait, on average, when a send is due
// before sends gather whatever the rate: many callers, each waiting for
// its answer (a closed loop), bring no company while they wait, but the
// ones a send answers come back during the next one's wait.
const gatherFrom = 4

// Company a send waits for: it waits when its window is expected to bring
// firstCompany calls or more, and stops at an arrival once the rest of it
// is expected to bring fewer than lastCompany.
const (
	firstCompany = 1
	lastCompany  = 0.5
)

// gather makes a send that is due wait for company, as until says, and
// marks it active when calls wait (active: next undoes that if another
// send took them). It reports !ok, having freed the slot, when another
// send is gathering: that one takes what waits.
func (b *batcher) gather(t *clock.Timer) (active, ok bool) {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.mu.Unlock()
		return false, true // next frees the slot
	}
	if b.gathering {
		b.busy--
		b.mu.Unlock()
		return false, false
	}
	now := b.clock.Now()
	b.add(1, now)
	b.avgReady += (float64(len(b.queue)) - b.avgReady) / 16
	ready := b.avgReady
	if b.opts.Sum != nil {
		ready = b.opts.Sum.update(b, ready)
	}
	end := b.until(now, ready)
	if !end.After(now) {
		b.mu.Unlock()
		return true, true
	}
	b.gathering, b.gatherEnd = true, end
	b.lateAt = now.Add(end.Sub(now) / 2)
	select {
	case <-b.kick: // a kick of an earlier gathering
	default:
	}
	b.mu.Unlock()
	if *t == nil {
		*t = b.clock.NewTimer(end.Sub(now))
	} else {
		(*t).Reset(end.Sub(now))
	}
	select {
	case <-(*t).C():
	case <-b.kick:
		(*t).Stop()
	case <-b.stop:
		(*t).Stop()
	}
	b.mu.Lock()
	b.gathering, b.kicked = false, false
	b.waited(b.clock.Now())
	b.mu.Unlock()
	return true, true
}

// until returns when a send due at now stops waiting for company, ready
// calls waiting on average when sends are due (over the Sum): now for
// not at all. A send does not wait when Gather is 0 or GatherOps ops wait.
// Otherwise it waits Gather from now when ready reaches gatherFrom (many
// callers, each waiting for its answer); or, when company expects
// firstCompany calls or more in Gather (company.worth), until the oldest
// call waiting has waited Gather (a call waits for company at most
// Gather, whatever the arrival rate, and a quiet batcher never waits).
// Either way no call waits for company past its patience.
func (b *batcher) until(now time.Time, ready float64) time.Time {
	wait := b.opts.Gather
	var end time.Time
	switch {
	case wait <= 0 || b.queued >= b.opts.GatherOps:
		return now
	case ready >= gatherFrom:
		end = now.Add(wait)
	case b.worth(wait):
		end = b.queue[0].arrived.Add(wait)
	default:
		return now
	}
	for _, w := range b.queue {
		if w.patience > 0 {
			if by := w.arrived.Add(w.patience); by.Before(end) {
				end = by
			}
		}
	}
	return end
}

// next appends to ws the waiting calls for the next send, keeping the
// slot and marking the send active (if gather has not), or frees the slot
// and returns nil if nobody waits (unmarking what gather marked).
func (b *batcher) next(ws []*waiter, active bool) []*waiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.busy--
		if active {
			b.add(-1, b.clock.Now())
		}
		return nil
	}
	if !active { // calls came after gather looked
		b.add(1, b.clock.Now())
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
	var err error
	var res []limiter.Result
	if len(buf.members) > 0 {
		if cap(buf.results) < len(buf.ops) {
			buf.results = make([]limiter.Result, len(buf.ops))
		}
		res = buf.results[:len(buf.ops)]
		b.sends.Add(1)
		b.ops.Add(int64(len(buf.ops)))
		// It outlives its members, but is not written once all have gone.
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
		start := time.Now()
		err = b.send(withLive(ctx, buf.live), buf.ops, res)
		cancel()
		if err == nil {
			b.lastSend.Store(int64(time.Since(start)))
		}
	}
	// No longer active before its callers are answered: what they send
	// next is not company it brought.
	b.mu.Lock()
	b.add(-1, b.clock.Now())
	b.mu.Unlock()
	if len(buf.members) > 0 {
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
