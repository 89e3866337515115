package rlqs

import (
	"context"
	"maps"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// report is one usage report being handled.
type report struct {
	now  time.Time
	all  []*envoyBucket // the buckets it named, still held
	subs []*envoyBucket // those it subscribed
	// early are the subscriptions answered before the store's round trip.
	early map[*envoyBucket]bool
	gone  []quota.Item
	// modes are the report's divisions' modes, set by the exchange.
	modes map[*division]quota.Mode
	// blanket (StoreAllow, StoreDeny) overrides the divisions' shares.
	blanket kind
	failed  bool
	refused [3]int // new buckets refused, by refusal
	// moved are the new buckets named with a time_elapsed: their Envoy
	// may have held them on another stream (division.moved).
	moved []movedClaim
}

// movedClaim is a new bucket's first usage, named with a time_elapsed.
type movedClaim struct {
	b       *envoyBucket
	allowed uint64
	elapsed time.Duration
}

// handle records a report's usages, answers its subscriptions of blanket
// rules, exchanges demand, settles the divisions it names, then answers
// every bucket it named (refreshing TTLs) or abandons it if idle. Only a
// report of another domain returns an error.
func (st *stream) handle(ctx context.Context, m *rlqspb.RateLimitQuotaUsageReports) error {
	s := st.svc
	s.inHand.Add(1)
	defer s.inHand.Add(-1)
	if err := st.bind(m.GetDomain()); err != nil {
		return err
	}
	ctx, span := s.opts.Tracer.Start(ctx, "rlqs.report")
	defer span.End()
	r := &report{now: s.opts.Clock.Now()}
	st.reported(r.now)
	set := s.opts.Rules()
	for _, u := range m.GetBucketQuotaUsages() {
		st.record(r, set, u)
	}
	st.noteRefused(r)
	span.SetAttributes(attribute.String("rlqs.domain", st.domain),
		attribute.Int("rlqs.buckets", len(r.all)), attribute.Int("rlqs.subscriptions", len(r.subs)))
	s.obs.Reported(s.label(st.domain), len(r.all), len(r.subs))
	if st.answerEarly(r) {
		if err := st.flush(); err != nil {
			return streamEnd(err)
		}
	}
	st.abandonIdle(r)
	st.dropUnnamed(r)
	s.credit(ctx, r)
	s.exchange(ctx, r)
	if r.failed {
		span.SetStatus(codes.Error, "demand store failed")
	}
	if r.blanket == limited {
		st.settleReport(ctx, r)
	}
	st.assignAll(r)
	s.sweep(r.now)
	return nil
}

// answerEarly queues the subscriptions of buckets that are not limited:
// their blanket rules need no store.
func (st *stream) answerEarly(r *report) bool {
	for _, b := range r.subs {
		if b.div != nil {
			continue
		}
		st.queueKind(b, b.res.kind)
		if r.early == nil {
			r.early = make(map[*envoyBucket]bool, len(r.subs))
		}
		r.early[b] = true
	}
	return len(r.early) > 0
}

// settleReport settles the divisions the report named.
func (st *stream) settleReport(ctx context.Context, r *report) {
	var dvs divisions
	for _, b := range r.all {
		if b.div != nil {
			dvs.add(b.div)
		}
	}
	st.svc.settle(ctx, dvs.list, r.modes, st)
}

// bind binds the stream to the domain of its first report.
func (st *stream) bind(domain string) error {
	switch {
	case st.domain == "" && domain == "":
		return status.Error(grpccodes.InvalidArgument, "the first usage report must name a domain")
	case st.domain == "":
		st.domain = domain
	case domain != "" && domain != st.domain:
		return status.Errorf(grpccodes.InvalidArgument, "usage report for domain %q on a stream of domain %q; open a stream per domain",
			domain, st.domain)
	}
	return nil
}

// record takes one bucket's usage.
func (st *stream) record(r *report, set *descriptors.Set, u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	id := u.GetBucketId().GetBucket()
	if len(id) == 0 {
		st.svc.obs.EmptyBucketID(st.svc.label(st.domain))
		return // no action can name it
	}
	if !st.svc.validID(id) {
		r.refused[refusedID]++
		return
	}
	entries, text := canonical(id)
	b := st.buckets[text] // only this goroutine writes buckets
	isNew := b == nil
	if isNew {
		if why, ok := st.admit(); !ok {
			r.refused[why]++
			return
		}
		b = &envoyBucket{st: st, id: maps.Clone(id), text: text, client: clientID(st.group, st.id, text), lastActive: r.now}
		st.add(b)
		r.subs = append(r.subs, b)
	}
	b.lastNamed = r.now
	// A new bucket an Envoy reports a second's use of or more may have
	// moved: it joins its division held out until credit decides, since
	// a settle meanwhile would count it beside its old value.
	elapsed := coveredBy(u.GetTimeElapsed().AsDuration(), st.svc.opts.ReportPeriod)
	mayHaveMoved := isNew && elapsed >= time.Second
	st.resolve(r, b, set, entries, mayHaveMoved)
	n := u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
	if n > 0 {
		b.lastActive = r.now
	}
	if b.div != nil && mayHaveMoved {
		r.moved = append(r.moved, movedClaim{b: b, allowed: u.GetNumRequestsAllowed(), elapsed: elapsed})
	}
	if b.div != nil {
		b.div.observe(b, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), elapsed, r.now, &st.svc.opts.Division)
	}
	st.svc.obs.Requests(st.svc.label(st.domain), u.GetNumRequestsAllowed(), u.GetNumRequestsDenied())
	r.all = append(r.all, b)
}

// resolve resolves b again when the rules changed, moving its client to
// its new rule's division (the exchange deletes the old demand); a new
// client joins held out if heldOut (division.join).
func (st *stream) resolve(r *report, b *envoyBucket, set *descriptors.Set, entries []descriptors.Entry, heldOut bool) {
	if b.res != nil && b.set == set {
		return
	}
	s := st.svc
	res := s.resolver.resolve(set, st.domain, entries, b.text)
	if res.limit == nil && (b.res == nil || b.res.limit != nil) {
		s.unmatched(st, b)
	}
	if b.div != nil && (res.kind != limited || res.storeKey != b.div.key) {
		r.gone = append(r.gone, s.leave(b, r.now, r.now.Add(s.leftFor()), false))
	}
	if res.kind == limited {
		if b.div == nil {
			b.div = s.acquire(res.storeKey, st.domain, res.global)
		}
		b.div.join(b, res.global, r.now, heldOut)
	}
	b.set, b.res = set, res
}

// abandonIdle abandons the report's buckets idle for IdleAfter.
func (st *stream) abandonIdle(r *report) {
	idle := st.svc.opts.IdleAfter
	if idle < 0 {
		return
	}
	kept := r.all[:0]
	for _, b := range r.all {
		if r.now.Sub(b.lastActive) < idle {
			kept = append(kept, b)
			continue
		}
		if b.div != nil {
			r.gone = append(r.gone, st.svc.leave(b, r.now, r.now.Add(st.svc.leftFor()), false))
		}
		st.abandon(b)
		st.svc.obs.Abandoned(st.svc.label(st.domain))
	}
	r.all = kept
}

// dropUnnamed abandons, once a report period, the buckets no report has
// named for Stale: they stop counting at once (docs/rlqs.md, "Silence").
func (st *stream) dropUnnamed(r *report) {
	s := st.svc
	if r.now.Sub(st.swept) < s.opts.ReportPeriod {
		return
	}
	st.swept = r.now
	for _, b := range st.snapshot() {
		if r.now.Sub(b.lastNamed) < s.opts.Division.Stale {
			continue
		}
		if b.div != nil {
			r.gone = append(r.gone, s.leave(b, r.now, r.now, false))
		}
		st.abandon(b)
		s.obs.Abandoned(s.label(st.domain))
	}
}

// credit credits the report's new buckets that an Envoy held on another
// stream with what they held there (division.moved), after reading their
// divisions afresh: the old stream's value, on another replica, is what
// says that it was assigned. Without a demand store only this replica's
// streams that ended can have held it.
func (s *Service) credit(ctx context.Context, r *report) {
	if len(r.moved) == 0 {
		return
	}
	if s.opts.Store != nil {
		var dvs divisions
		for _, m := range r.moved {
			if m.b.div != nil {
				dvs.add(m.b.div)
			}
		}
		items := make([]quota.Item, len(dvs.list))
		tickets := make([]uint64, len(dvs.list))
		for i, dv := range dvs.list {
			dv.claimRead(r.now, 0)
			tickets[i] = dv.readTicket()
			items[i] = quota.Item{Key: dv.key, Op: quota.Read, Fresh: s.opts.Division.Stale}
		}
		got, err := s.exchangeItems(ctx, items, s.valueTTL(), s.storeNow(r.now))
		if err != nil {
			s.noteStoreFailed(err)
		} else {
			for i, dv := range dvs.list {
				dv.setRemote(s.opts.Replica, got[i], r.now, tickets[i])
			}
		}
	}
	for _, m := range r.moved {
		if m.b.div != nil {
			m.b.div.moved(m.b, m.allowed, m.elapsed, r.now, &s.opts.Division)
		}
	}
}

// exchange publishes the report's demand, deletes that of clients gone,
// and reads the demand a Refresh old, in one round trip; it sets the
// report's modes, by policy when the store fails.
func (s *Service) exchange(ctx context.Context, r *report) {
	r.modes = map[*division]quota.Mode{}
	items := make([]quota.Item, len(r.gone), len(r.gone)+len(r.all))
	copy(items, r.gone)
	readers := make([]*division, len(r.gone), cap(items)) // the division of each item that reads, else nil
	tickets := make([]uint64, len(r.gone), cap(items))
	for _, b := range r.all {
		dv := b.div
		if dv == nil {
			continue
		}
		op := quota.Write
		var reader *division
		var ticket uint64
		if _, seen := r.modes[dv]; !seen {
			r.modes[dv] = quota.Global
			if s.opts.Store != nil && dv.claimRead(r.now, s.opts.Refresh) {
				op |= quota.Read
				reader, ticket = dv, dv.readTicket()
			}
		}
		readers = append(readers, reader)
		tickets = append(tickets, ticket)
		d := dv.published(b.client)
		d.Replica, d.Client = s.opts.Replica, b.client
		items = append(items, quota.Item{Key: dv.key, Op: op, Demand: d, Fresh: s.opts.Division.Stale})
	}
	if s.opts.Store == nil || len(items) == 0 {
		return
	}
	ctx, span := s.opts.Tracer.Start(ctx, "rlqs.exchange")
	defer span.End()
	start := time.Now()
	got, err := s.exchangeItems(ctx, items, s.valueTTL(), s.storeNow(r.now))
	s.obs.Exchanged(time.Since(start), len(items))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		s.storeFailed(r, err)
		return
	}
	s.noteStoreUp()
	s.notify(itemKeys(r.gone))
	for i, dv := range readers {
		if dv != nil {
			dv.setRemote(s.opts.Replica, got[i], r.now, tickets[i])
		}
	}
}

// noteStoreFailed counts a failed exchange; the store's changes of
// state go to Options.StoreLog (noteStoreUp).
func (s *Service) noteStoreFailed(err error) {
	s.obs.StoreFailed()
	s.storeDown.Store(true)
	if !s.opts.StoreLog.Down("demand store exchanges fail; shares follow --rlqs-on-store-error until it answers",
		zap.Stringer("policy", s.opts.OnStoreError), zap.Error(err)) {
		s.log.Debug("demand store exchange failed", zap.Error(err))
	}
}

// noteStoreUp notes a successful exchange.
func (s *Service) noteStoreUp() {
	s.storeDown.Store(false)
	s.opts.StoreLog.Up("demand store exchanges succeed again")
}

// storeFailed sets the report's modes by policy.
func (s *Service) storeFailed(r *report, err error) {
	r.failed = true
	s.noteStoreFailed(err)
	switch s.opts.OnStoreError {
	case StoreAllow:
		r.blanket = allowAll
	case StoreDeny:
		r.blanket = denyAll
	}
	for dv := range r.modes {
		switch s.opts.OnStoreError {
		case StoreSplit:
			r.modes[dv] = quota.Split
		case StoreKeep:
			dv.mu.Lock()
			_, last := dv.q.Remote()
			dv.mu.Unlock()
			if last.IsZero() || r.now.Sub(last) > s.opts.StoreGrace {
				r.modes[dv] = quota.Split
			}
		}
	}
}

// storeNow is the time to stamp demand with: Options.Now if given, else
// zero, the store's clock (Redis TIME, one for every replica).
func (s *Service) storeNow(now time.Time) time.Time {
	if s.opts.storeClock {
		return time.Time{}
	}
	return now
}

// coveredBy is the time a usage's time_elapsed covers. Envoy truncates it
// to whole seconds: a report its timer sends a few milliseconds early
// says 4 s of a 5 s period, which read as is makes the bucket's rate a
// quarter higher than it was (docs/rlqs.md, "What Envoy does, read from
// its source"). So a reading less than a second short of the report
// period is the period; any other is taken as it is.
func coveredBy(elapsed, period time.Duration) time.Duration {
	if period > time.Second && elapsed >= period-time.Second && elapsed < period {
		return period
	}
	return elapsed
}
