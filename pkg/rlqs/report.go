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
	all  []*held // the buckets it named, still held
	subs []*held // those it subscribed
	// early are the subscriptions answered before the store's round trip.
	early map[*held]bool
	named map[*held]bool // all, as a set, once divisions start
	gone  []quota.Item
	// modes are the division modes of the report's pools, set by the
	// exchange.
	modes map[*pool]quota.Mode
	// blanket, set by the exchange under the Allow and Deny policies,
	// overrides the division of limited buckets.
	blanket kind
	failed  bool
}

// handle handles one usage report: it records every bucket's usage,
// answers the subscriptions at once, exchanges demand with the store,
// then queues an assignment for every bucket it named (which refreshes
// their TTLs), and pushes changed shares to the other streams sharing a
// bucket. Idle buckets are abandoned instead. Only a report that breaks
// the protocol (another domain) returns an error.
func (st *stream) handle(ctx context.Context, m *rlqspb.RateLimitQuotaUsageReports) error {
	s := st.svc
	if err := st.bind(m.GetDomain()); err != nil {
		return err
	}
	ctx, span := s.opts.Tracer.Start(ctx, "rlqs.report")
	defer span.End()
	r := &report{now: s.opts.Now()}
	set := s.opts.Rules()
	for _, u := range m.GetBucketQuotaUsages() {
		st.record(r, set, u)
	}
	span.SetAttributes(attribute.String("rlqs.domain", st.domain),
		attribute.Int("rlqs.buckets", len(r.all)), attribute.Int("rlqs.subscriptions", len(r.subs)))
	s.obs.Reported(s.label(st.domain), len(r.all), len(r.subs))
	if st.answerEarly(r) {
		if err := st.flush(); err != nil {
			return streamEnd(err)
		}
	}
	st.abandonIdle(r)
	s.exchange(ctx, r)
	if r.failed {
		span.SetStatus(codes.Error, "demand store failed")
	}
	st.assignAll(r)
	return nil
}

// answerEarly queues the assignments of the report's subscriptions that
// need not wait for the store: blanket rules, and shares of limits whose
// other replicas' demand the replica has read before. A share of a limit
// never read waits for the exchange, which reads it: the first answer
// would otherwise ignore the other replicas' Envoys.
func (st *stream) answerEarly(r *report) bool {
	for _, h := range r.subs {
		if h.pool != nil && st.svc.opts.Store != nil && h.pool.neverRead() {
			continue
		}
		st.assignOne(r, h)
		if r.early == nil {
			r.early = make(map[*held]bool, len(r.subs))
		}
		r.early[h] = true
	}
	return len(r.early) > 0
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
	entries, text := canonical(id)
	h := st.buckets[text] // only this goroutine writes buckets
	if h == nil {
		h = &held{st: st, id: maps.Clone(id), text: text, client: clientID(st.id, text), lastActive: r.now}
		st.add(h)
		r.subs = append(r.subs, h)
	}
	st.resolve(r, h, set, entries)
	n := u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
	if n > 0 {
		h.lastActive = r.now
	}
	if h.pool != nil {
		h.pool.observe(h.client, n, u.GetTimeElapsed().AsDuration(), r.now, &st.svc.opts.Division)
	}
	st.svc.obs.Requests(st.svc.label(st.domain), u.GetNumRequestsAllowed(), u.GetNumRequestsDenied())
	r.all = append(r.all, h)
}

// resolve (re)resolves a bucket when the rules changed, moving its client
// to the pool of its new rule (its demand in the old one is deleted with
// the report's exchange).
func (st *stream) resolve(r *report, h *held, set *descriptors.Set, entries []descriptors.Entry) {
	if h.res != nil && h.set == set {
		return
	}
	s := st.svc
	res := s.resolver.resolve(set, st.domain, entries, h.text)
	if h.pool != nil && (res.kind != limited || res.storeKey != h.pool.key) {
		r.gone = append(r.gone, s.leave(h))
	}
	if res.kind == limited {
		if h.pool == nil {
			h.pool = s.acquire(res.storeKey, st.domain, res.quota)
		}
		h.pool.join(h, res.quota, r.now)
	}
	h.set, h.res = set, res
}

// abandonIdle abandons the report's buckets that have been idle for
// IdleAfter.
func (st *stream) abandonIdle(r *report) {
	idle := st.svc.opts.IdleAfter
	if idle < 0 {
		return
	}
	kept := r.all[:0]
	for _, h := range r.all {
		if r.now.Sub(h.lastActive) < idle {
			kept = append(kept, h)
			continue
		}
		if h.pool != nil {
			r.gone = append(r.gone, st.svc.leave(h))
		}
		st.abandon(h)
		st.svc.obs.Abandoned(st.svc.label(st.domain))
	}
	r.all = kept
}

// exchange publishes the demand of the report's clients, deletes that of
// clients gone, and reads the other replicas' demand of the pools whose
// copy is a Refresh old, in one round trip. It sets the report's division
// modes, by policy when the store fails.
func (s *Service) exchange(ctx context.Context, r *report) {
	r.modes = map[*pool]quota.Mode{}
	items := make([]quota.Item, len(r.gone), len(r.gone)+len(r.all))
	copy(items, r.gone)
	readers := make([]*pool, len(r.gone), cap(items)) // the pool of each item that reads, else nil
	for _, h := range r.all {
		p := h.pool
		if p == nil {
			continue
		}
		op := quota.Write
		var reader *pool
		if _, seen := r.modes[p]; !seen {
			r.modes[p] = quota.Global
			if s.opts.Store != nil && p.claimRead(r.now, s.opts.Refresh) {
				op |= quota.Read
				reader = p
			}
		}
		readers = append(readers, reader)
		items = append(items, quota.Item{Key: p.key, Op: op,
			Demand: quota.Demand{Replica: s.opts.Replica, Client: h.client, Rate: p.demand(h.client)}})
	}
	if s.opts.Store == nil || len(items) == 0 {
		return
	}
	ctx, span := s.opts.Tracer.Start(ctx, "rlqs.exchange")
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	start := time.Now()
	got, err := s.opts.Store.Exchange(ctx, items, s.opts.Division.Stale, s.storeNow(r.now))
	s.obs.Exchanged(time.Since(start), len(items))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		s.storeFailed(r, err)
		return
	}
	if s.storeDown.CompareAndSwap(true, false) {
		s.log.Info("demand store exchanges succeed again")
	}
	for i, p := range readers {
		if p != nil {
			p.setRemote(s.opts.Replica, got[i], r.now)
		}
	}
}

// storeFailed sets the report's modes by the store failure policy. It
// logs when the store starts failing, not every failure (they are
// counted); exchanged logs when it answers again.
func (s *Service) storeFailed(r *report, err error) {
	r.failed = true
	s.obs.StoreFailed()
	if s.storeDown.CompareAndSwap(false, true) {
		s.log.Warn("demand store exchanges fail; shares follow --rlqs-on-store-error until it answers",
			zap.Stringer("policy", s.opts.OnStoreError), zap.Error(err))
	} else {
		s.log.Debug("demand store exchange failed", zap.Error(err))
	}
	switch s.opts.OnStoreError {
	case StoreAllow:
		r.blanket = allowAll
	case StoreDeny:
		r.blanket = denyAll
	}
	for p := range r.modes {
		switch s.opts.OnStoreError {
		case StoreSplit:
			r.modes[p] = quota.Split
		case StoreKeep:
			p.mu.Lock()
			_, last := p.q.Remote()
			p.mu.Unlock()
			if last.IsZero() || r.now.Sub(last) > s.opts.StoreGrace {
				r.modes[p] = quota.Split
			}
		}
	}
}

// storeNow is the time to stamp demand with: the service's clock when one
// was given (tests), else zero, the store's own clock (Redis TIME, one for
// every replica).
func (s *Service) storeNow(now time.Time) time.Time {
	if s.opts.storeClock {
		return time.Time{}
	}
	return now
}
