package rlqs

import (
	"context"
	"sync"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// With a worker budget (Options.ReportWorkers), a stream's report is not
// handled on the stream's goroutine: the stream joins the service's queue
// of streams with a report waiting, and a worker takes the waiting
// reports of many streams at once and handles them as one batch: one
// demand exchange for them all, one settle of every division they name
// (docs/rlqs.md, "RLQS and RLS on one replica"). The stream's goroutine
// only sends what is queued to it. Under load a batch grows with the
// reports that came while the one before was handled, so that the store
// round trips, settles and goroutine wake-ups a report costs shrink as
// reports come faster.

// batchReports and batchBuckets bound a batch: it takes the waiting
// reports in the order they came, at least one, until it holds
// batchReports reports or batchBuckets buckets.
const (
	batchReports = 256
	batchBuckets = exchangeBatch
)

// job is one stream's report in a batch.
type job struct {
	st   *stream
	m    *rlqspb.RateLimitQuotaUsageReports
	r    *report
	ctx  context.Context // the batch's, with its span
	span trace.Span
	err  error // a report of another domain: it ends the stream
}

// reportQueue is the streams whose report waits for a worker, in the
// order their reports came. A stream is in it at most once: only while
// it is queued (st.in.queued), and never while a worker handles its
// report (st.in.working); the worker queues it again if another report
// came meanwhile.
type reportQueue struct {
	mu      sync.Mutex
	streams []*stream
	takers  int // goroutines started to take a batch that have not yet
}

// enqueue queues a stream whose report waits; if no goroutine is on its
// way to take a batch, it starts one. st.mu is not held.
func (s *Service) enqueue(st *stream) {
	q := &s.queue
	q.mu.Lock()
	q.streams = append(q.streams, st)
	start := q.takers == 0
	if start {
		q.takers++
	}
	q.mu.Unlock()
	if start {
		s.batchers.Add(1)
		go s.work()
	}
}

// work takes batches while reports wait, each with a worker slot, which
// it gives up for its store round trips (worker).
func (s *Service) work() {
	defer s.batchers.Done()
	w := &worker{slots: s.workers}
	w.acquire()
	defer w.release()
	ctx := withWorker(context.Background(), w)
	for taker := true; ; taker = false {
		jobs := s.takeBatch(taker)
		if len(jobs) == 0 {
			return
		}
		s.handleBatch(ctx, jobs, false)
		for _, j := range jobs {
			j.st.doneWorking(j.err)
		}
		s.inHand.Add(-int64(len(jobs))) // offer's
	}
}

// takeBatch takes a batch of waiting reports, nil if none waits; taker
// says the caller was started to take one. If reports are left waiting
// past the batch's bounds and no goroutine is on its way to take them, it
// starts one.
func (s *Service) takeBatch(taker bool) []*job {
	q := &s.queue
	q.mu.Lock()
	if taker {
		q.takers--
	}
	var sts []*stream
	buckets := 0
	for len(q.streams) > 0 && len(sts) < batchReports && (len(sts) == 0 || buckets < batchBuckets) {
		st := q.streams[0]
		q.streams[0] = nil
		q.streams = q.streams[1:]
		sts = append(sts, st)
		buckets += st.pendingBuckets()
	}
	more := len(q.streams) > 0 && q.takers == 0
	if more {
		q.takers++
	}
	if len(q.streams) == 0 {
		q.streams = nil // let the backing array go
	}
	q.mu.Unlock()
	if more {
		s.batchers.Add(1)
		go s.work()
	}
	jobs := make([]*job, 0, len(sts))
	for _, st := range sts {
		if m := st.startWorking(); m != nil {
			jobs = append(jobs, &job{st: st, m: m})
		}
	}
	return jobs
}

// pendingBuckets is how many buckets the waiting report names.
func (st *stream) pendingBuckets() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.in.pending == nil {
		return 0
	}
	return len(st.in.pending.BucketQuotaUsages)
}

// startWorking takes the stream's waiting report for a worker, which
// handles the stream's buckets until doneWorking; nil if the stream ended
// (its report is dropped: closeStream forgets its buckets).
func (st *stream) startWorking() *rlqspb.RateLimitQuotaUsageReports {
	st.work.Lock()
	st.mu.Lock()
	st.in.queued = false
	closed := st.closed
	if !closed {
		st.in.working = true
	}
	st.mu.Unlock()
	m := st.take()
	if closed {
		st.work.Unlock()
		if m != nil {
			st.svc.inHand.Add(-1) // offer's
		}
		return nil
	}
	if m == nil {
		st.doneWorking(nil)
	}
	return m
}

// doneWorking ends a worker's hold on the stream: a report of another
// domain (err) ends it; a report that came meanwhile queues it again.
func (st *stream) doneWorking(err error) {
	st.mu.Lock()
	st.in.working = false
	again := err == nil && st.in.pending != nil && !st.closed
	if again {
		st.in.queued = true
	}
	dropped := st.closed && st.dropPendingLocked()
	st.mu.Unlock()
	st.work.Unlock()
	if dropped {
		st.svc.inHand.Add(-1) // offer's
	}
	if err != nil {
		st.cancel(err)
	}
	if again {
		st.svc.enqueue(st)
	}
}

// handleBatch handles the reports of distinct streams: each is recorded
// and its subscriptions of blanket rules answered (begin); then one
// exchange publishes and reads the demand of them all, one settle
// settles every division they name, and each is answered: every bucket
// it named gets its share or blanket rule (refreshing its TTL). own says
// the caller is the stream's own goroutine (no worker budget), which
// sends the early answers before the store round trip itself; a worker's
// streams send them from their own goroutines as they are queued.
func (s *Service) handleBatch(ctx context.Context, jobs []*job, own bool) {
	s.inHand.Add(1)
	defer s.inHand.Add(-1)
	live := make([]*job, 0, len(jobs))
	rs := make([]*report, 0, len(jobs))
	for _, j := range jobs {
		_, j.span = s.opts.Tracer.Start(j.st.srv.Context(), "rlqs.report")
		j.ctx = trace.ContextWithSpan(ctx, j.span) // ctx's worker, the report's span
		j.r, j.err = j.st.begin(j.m, j.span)
		j.m = nil
		if j.err == nil && own && len(j.r.early) > 0 {
			if err := j.st.flush(); err != nil {
				j.err = streamEnd(err)
			}
		}
		if j.r == nil || j.err != nil {
			j.span.End()
			continue
		}
		s.credit(j.ctx, j.r)
		live = append(live, j)
		rs = append(rs, j.r)
	}
	if len(live) == 0 {
		return
	}
	// The batch's store calls are children of its first report's span.
	bctx := live[0].ctx
	modes := s.exchange(bctx, rs)
	var dvs divisions
	from := askers{}
	for _, j := range live {
		if j.r.blanket != limited {
			continue
		}
		from[j.st] = struct{}{}
		for _, b := range j.r.all {
			if b.div != nil {
				dvs.add(b.div)
			}
		}
	}
	if len(dvs.list) > 0 {
		s.settle(bctx, dvs.list, modes, from)
	}
	for _, j := range live {
		j.st.assignAll(j.r)
		if j.r.failed {
			j.span.SetStatus(codes.Error, "demand store failed")
		}
		j.span.End()
	}
	s.sweep(rs[0].now)
}

// markClosed marks the stream closed once no worker handles its report:
// no worker takes it after, and a report waiting that no worker will take
// is dropped.
func (st *stream) markClosed() {
	st.work.Lock()
	st.mu.Lock()
	st.closed = true
	dropped := !st.in.queued && !st.in.working && st.dropPendingLocked()
	st.mu.Unlock()
	st.work.Unlock()
	if dropped {
		st.svc.inHand.Add(-1) // offer's
	}
}

// dropPendingLocked drops the waiting report, if one waits, and reports
// whether it did; st.mu is held.
func (st *stream) dropPendingLocked() bool {
	if st.in.pending == nil {
		return false
	}
	st.in.pending, st.in.index = nil, nil
	select {
	case st.in.taken <- struct{}{}:
	default:
	}
	return true
}
