package rlqs

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// settlement is one division's part of a settle: the cuts to send at
// once, and the raises granted, or asked of the store with the lowered
// rates it must learn first.
type settlement struct {
	dv      *division
	items   []quota.Item   // for the store
	of      []*envoyBucket // each item's client
	kinds   []itemKind
	cuts    []held
	granted []held
	// short are the clients the store granted a raise less than asked:
	// other replicas' clients hold the rest.
	short []*envoyBucket
}

// itemKind is what an item of a settlement asks of the store.
type itemKind uint8

const (
	publish itemKind = iota // a lowered rate
	adopt                   // what a moved client holds, adopted
	ask                     // a raise (adopting too, for a moved client)
)

// settle brings the divisions' ledgers to their targets (docs/rlqs.md,
// "The ledger"): every cut is queued at once, and a raise is granted only
// from what no Envoy may hold, a cut counting at its old rate until it
// has been sent; with a demand store, the store grants it against every
// replica's ledger. modes gives each division's mode (nil: the last);
// from is the stream whose report asked, whose actions are no pushes.
// Where the store grants a raise short of its target, the replicas whose
// clients hold the rest are told the rate is wanted (wanted).
func (s *Service) settle(ctx context.Context, dvs []*division, modes map[*division]quota.Mode, from *stream) {
	if p := s.opts.OnStoreError; s.storeDown.Load() && (p == StoreAllow || p == StoreDeny) {
		return // blanket rules answer every report meanwhile
	}
	var short []shortRaise
	defer func() { s.wanted(short) }()
	s.inHand.Add(1)
	defer s.inHand.Add(-1)
	for len(dvs) > 0 {
		useStore := s.opts.Store != nil && !s.storeDown.Load()
		now := s.opts.Clock.Now()
		var parts []*settlement
		for _, dv := range dvs {
			if p := s.plan(dv, modes, useStore, now); p != nil {
				parts = append(parts, p)
			}
		}
		for _, p := range parts {
			for _, h := range p.cuts {
				s.queueHeld(h, from)
			}
		}
		adopted := s.reserve(ctx, parts)
		s.reread(ctx, adopted)
		var again []*division
		for _, p := range parts {
			for _, h := range p.granted {
				s.queueHeld(h, from)
			}
			for _, b := range p.short {
				short = append(short, shortRaise{p.dv, b})
			}
			if p.dv.done() || slices.Contains(adopted, p.dv) {
				again = append(again, p.dv)
			}
		}
		dvs, modes = again, nil
	}
}

// shortRaise is a client of a division the store granted a raise short
// of its target.
type shortRaise struct {
	dv *division
	b  *envoyBucket
}

// wanted tells the other replicas serving the divisions of clients the
// store granted a raise short of their target that the rate is wanted, so
// that they read this one's demand and cut theirs at once rather than at
// their next report (at most once a quarter period for each client).
func (s *Service) wanted(short []shortRaise) {
	var dvs divisions
	now := s.opts.Clock.Now()
	for _, sr := range short {
		if sr.dv.shared() && sr.dv.claimWanted(sr.b, now, s.opts.ReportPeriod/4) {
			dvs.add(sr.dv)
		}
	}
	keys := make([]string, len(dvs.list))
	for i, dv := range dvs.list {
		keys[i] = wantedMark + dv.key
	}
	s.notify(keys)
}

// plan takes a division's settle on: nil if another goroutine runs one,
// which is asked to run again.
func (s *Service) plan(dv *division, modes map[*division]quota.Mode, useStore bool, now time.Time) *settlement {
	cfg := &s.opts.Division
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.settling {
		dv.again = true
		return nil
	}
	dv.settling = true
	mode, ok := modes[dv]
	if !ok {
		mode = dv.mode
	}
	store := useStore && mode == quota.Global
	for _, b := range dv.buckets {
		if b.adoptLeft > 0 && (!store || now.Sub(b.movedAt) > cfg.Stale) {
			b.adoptLeft = 0 // nothing of its old value came to be adopted
			dv.holdLocked(b, dv.q.Client(b.client))
		}
	}
	dv.targetsLocked(mode, cfg)
	p := &settlement{dv: dv}
	capacity := dv.capLocked(mode, cfg)
	var raises []raise
	for _, b := range dv.buckets {
		c := dv.q.Client(b.client)
		raising := false
		switch {
		case c.Hold:
			// A moved client keeps what it held on its old stream, whose
			// value stands for it in the division until adopted.
		case b.target < c.Assigned && (!b.cutting || b.target < b.cutTo):
			// A cut never becomes shallower on its way: one already sent
			// would then be undercounted.
			b.cutting, b.cutTo = true, b.target
			p.cuts = append(p.cuts, dv.heldLocked(b))
		case !b.cutting && b.target > c.Assigned && (b.raiseDue || c.Wants()):
			raises = append(raises, raise{b: b, want: b.target})
			raising = true
		}
		b.raiseDue = false
		switch {
		case !store:
		case b.unpublished:
			p.add(dv, b, c, c.Assigned, capacity, publish)
		case b.adoptLeft > 0 && !raising:
			p.add(dv, b, c, c.Assigned, capacity, adopt)
		}
	}
	if len(raises) == 0 {
		if len(p.cuts) == 0 && len(p.items) == 0 {
			dv.settling = false // nothing to do
			return nil
		}
		return p
	}
	sortRaises(raises, dv)
	if store {
		for _, r := range raises {
			p.add(dv, r.b, dv.q.Client(r.b.client), r.want, capacity, ask)
		}
		return p
	}
	free := capacity - dv.localHeldLocked(now)
	if mode == quota.Global {
		free -= dv.q.RemoteHeld()
	}
	for _, r := range raises {
		c := dv.q.Client(r.b.client)
		to := c.Assigned + min(r.want-c.Assigned, free)
		if to <= c.Assigned || (to < r.want && to < c.Assigned*(1+cfg.Raise)) {
			continue // nothing, or too little to be worth a new bucket
		}
		free -= to - c.Assigned
		c.Assigned = to
		p.granted = append(p.granted, dv.heldLocked(r.b))
	}
	return p
}

// add adds an item asking the store to hold rate for b's client.
func (p *settlement) add(dv *division, b *envoyBucket, c *quota.Client, rate, capacity float64, k itemKind) {
	d := quota.Demand{Replica: b.st.svc.opts.Replica, Client: b.client, Rate: -1, Assigned: rate}
	if c.Known {
		d.Rate = c.Demand
	}
	it := quota.Item{Key: dv.key, Demand: d, Op: quota.Reserve, Cap: capacity}
	if k != publish {
		it.Adopt, it.Fresh = b.adoptLeft, b.st.svc.adoptAfter()
	}
	p.items = append(p.items, it)
	p.of = append(p.of, b)
	p.kinds = append(p.kinds, k)
}

// reserve asks the store for the parts' items, whole parts in a batch of
// about exchangeBatch items, and grants the raises it granted; after an
// error nothing more is granted, and the lowered rates wait for the next
// settle. It returns the divisions where a client adopted: their view of
// the others is out of date.
func (s *Service) reserve(ctx context.Context, parts []*settlement) []*division {
	ctx, span := s.opts.Tracer.Start(ctx, "rlqs.reserve")
	defer span.End()
	ctx = context.WithoutCancel(ctx)
	var freed []string
	var adopted []*division
	for len(parts) > 0 {
		var items []quota.Item
		n := 0
		for n < len(parts) && (n == 0 || len(items)+len(parts[n].items) <= exchangeBatch) {
			items = append(items, parts[n].items...)
			n++
		}
		batch := parts[:n]
		parts = parts[n:]
		if len(items) == 0 {
			continue
		}
		bctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
		start := time.Now()
		got, err := s.storeExchange(bctx, items, s.valueTTL(), s.storeNow(s.opts.Clock.Now()))
		cancel()
		s.obs.Exchanged(time.Since(start), len(items))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			s.noteStoreFailed(err)
			break
		}
		i := 0
		for _, p := range batch {
			if p.apply(got[i : i+len(p.items)]) {
				adopted = append(adopted, p.dv)
			}
			i += len(p.items)
			if p.publishes() && p.dv.shared() {
				freed = append(freed, p.dv.key)
			}
		}
	}
	s.notify(freed)
	return adopted
}

// reread reads the divisions' buckets again, for their view of the other
// replicas' clients.
func (s *Service) reread(ctx context.Context, dvs []*division) {
	if len(dvs) == 0 {
		return
	}
	items := make([]quota.Item, len(dvs))
	tickets := make([]uint64, len(dvs))
	for i, dv := range dvs {
		items[i] = quota.Item{Key: dv.key, Op: quota.Read, Fresh: s.opts.Division.Stale}
		tickets[i] = dv.readTicket()
	}
	got, err := s.exchangeItems(context.WithoutCancel(ctx), items, s.valueTTL(), s.storeNow(s.opts.Clock.Now()))
	if err != nil {
		s.noteStoreFailed(err)
	}
	now := s.opts.Clock.Now()
	for i, dv := range dvs {
		if err == nil {
			dv.setRemote(s.opts.Replica, got[i], now, tickets[i])
		}
		dv.releaseHolds()
	}
}

// publishes reports whether the part lowers what the store holds.
func (p *settlement) publishes() bool {
	for _, k := range p.kinds {
		if k == publish {
			return true
		}
	}
	return false
}

// apply takes the store's answers to the part's items, and reports
// whether a client adopted.
func (p *settlement) apply(got [][]quota.Demand) bool {
	dv := p.dv
	dv.mu.Lock()
	defer dv.mu.Unlock()
	adopted := false
	for j, it := range p.items {
		b := p.of[j]
		c := dv.q.Client(b.client)
		if c == nil || dv.buckets[b.client] != b || len(got[j]) != 1 {
			continue
		}
		if p.kinds[j] == publish {
			b.unpublished = c.Assigned < it.Demand.Assigned
			continue
		}
		b.adoptLeft = max(0, b.adoptLeft-got[j][0].Adopted)
		if got[j][0].Adopted > 0 {
			// Out of the division until it reads the old value as
			// left (reread): it would be counted beside it meanwhile.
			adopted = true
		} else {
			dv.holdLocked(b, c)
		}
		g := got[j][0].Assigned
		if p.kinds[j] == ask && g < it.Demand.Assigned {
			p.short = append(p.short, b)
		}
		if p.kinds[j] == ask && g > c.Assigned && !b.cutting {
			c.Assigned = g
			p.granted = append(p.granted, dv.heldLocked(b))
		}
	}
	return adopted
}

// done ends the division's settle and reports whether to run it again.
func (dv *division) done() bool {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.settling = false
	if dv.again {
		dv.again = false
		return true
	}
	return false
}

// queueHeld queues what an Envoy holds, or is to hold, on its stream.
func (s *Service) queueHeld(h held, from *stream) {
	b := h.b
	if b.st.queue(b.text, pending{a: s.assignment(b.id, strategyOf(h)), b: b, share: h.share, seq: h.seq, ledger: true}) && b.st != from {
		s.obs.Pushed(s.label(b.st.domain))
	}
}
