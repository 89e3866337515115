package limiter

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// maxCost is where a charge saturates: over every limit, exact in Lua.
const maxCost = 1 << 52

// Limiter decides requests against its rules and Store. It is safe for
// concurrent use; a request finishes on the rules it started with.
type Limiter struct {
	store  Store
	all    AtomicStore // store, if it decides all or nothing
	atomic bool        // every domain decides all or nothing
	quota  bool        // global quota mode: Options.QuotaMode
	prefix string
	limits Limits
	rules  atomic.Pointer[descriptors.Set]
	pool   sync.Pool // *scratch
}

// Options configure a Limiter.
type Options struct {
	KeyPrefix string  // starts every store key (default "ratelimit")
	Limits    *Limits // bound request sizes (default DefaultLimits)
	// Atomic decides every domain's requests all or nothing; see Check.
	Atomic bool
	// QuotaMode makes every descriptor but an unlimited one a quota
	// descriptor, matched or not (envoyproxy/ratelimit's QUOTA_MODE).
	QuotaMode bool
}

// New returns a Limiter over store, with no rules until SetRules.
func New(store Store, opts Options) *Limiter {
	l := &Limiter{store: store, atomic: opts.Atomic, quota: opts.QuotaMode, prefix: opts.KeyPrefix, limits: DefaultLimits}
	l.all, _ = store.(AtomicStore)
	if l.prefix == "" {
		l.prefix = "ratelimit"
	}
	if opts.Limits != nil {
		l.limits = *opts.Limits
	}
	l.pool.New = func() any { return new(scratch) }
	return l
}

// SetRules swaps in a new rule set.
func (l *Limiter) SetRules(s *descriptors.Set) { l.rules.Store(s) }

// Rules returns the current rule set (nil before the first SetRules).
func (l *Limiter) Rules() *descriptors.Set { return l.rules.Load() }

// Store returns the limiter's store.
func (l *Limiter) Store() Store { return l.store }

// KeyPrefix returns the prefix of every store key.
func (l *Limiter) KeyPrefix() string { return l.prefix }

type scratch struct {
	ops     []Op
	results []Result
	index   []int                // status index of each op
	limits  []*descriptors.Limit // limit of each op
	key     []byte
}

// Check decides req: one status per descriptor, in request order, or an
// error wrapping ErrInvalid (a malformed request), ErrUnavailable (a store
// failure) or ErrNotAtomic. Quota descriptors make a request OVER_LIMIT
// only all together, refunds never; an atomic domain's request is decided
// all or nothing (docs/rules.md, "All-or-nothing decisions").
func Check[E descriptors.KV](ctx context.Context, l *Limiter, req *Request[E]) (*Response, error) {
	resp := new(Response)
	if err := CheckInto(ctx, l, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// CheckInto is Check answering in resp, reusing its Statuses, so that a
// caller may pool responses. After an error resp holds nothing of use.
func CheckInto[E descriptors.KV](ctx context.Context, l *Limiter, req *Request[E], resp *Response) error {
	sc := l.pool.Get().(*scratch)
	defer l.pool.Put(sc)
	atomic, err := prepare(l, req, resp, sc)
	if err != nil {
		return err
	}
	if len(sc.ops) > 0 {
		if cap(sc.results) < len(sc.ops) {
			sc.results = make([]Result, len(sc.ops))
		}
		res := sc.results[:len(sc.ops)]
		if atomic {
			if err := l.takeAll(ctx, sc, res, resp.Statuses); err != nil {
				return err
			}
		} else if err := l.store.Take(ctx, sc.ops, res); err != nil {
			return fmt.Errorf("take: %w", err)
		}
		applyResults(sc, res, resp.Statuses)
	}
	resp.Code = overall(resp.Statuses)
	clear(sc.ops) // drop key and limit references before pooling
	clear(sc.limits)
	return nil
}

// applyResults sets the statuses from the results of sc.ops, a joint's
// results at once.
func applyResults(sc *scratch, res []Result, sts []Status) {
	for j := 0; j < len(res); {
		st := &sts[sc.index[j]]
		if st.Limit.Group == nil {
			applyResult(st, res[j])
			j++
			continue
		}
		k := j + 1
		for k < len(res) && sc.ops[k].Joined {
			k++
		}
		applyParts(st, sc.limits[j:k], res[j:k])
		j = k
	}
}

// prepare validates req, sets resp's statuses to their limits and queues
// their store ops in sc (none for a domain without rules: all OK); atomic
// says whether the domain decides all or nothing.
func prepare[E descriptors.KV](l *Limiter, req *Request[E], resp *Response, sc *scratch) (atomic bool, err error) {
	if err := l.limits.validate(req.Domain, len(req.Descriptors)); err != nil {
		return false, err
	}
	for i := range req.Descriptors {
		if err := validateDescriptor(l.limits, i, &req.Descriptors[i]); err != nil {
			return false, err
		}
	}
	resp.Code = OK
	if n := len(req.Descriptors); cap(resp.Statuses) >= n {
		resp.Statuses = resp.Statuses[:n]
		clear(resp.Statuses)
	} else {
		resp.Statuses = make([]Status, n)
	}
	sc.ops, sc.index, sc.limits = sc.ops[:0], sc.index[:0], sc.limits[:0]
	domain := l.rules.Load().Domain(req.Domain)
	if domain == nil {
		return false, nil // every descriptor unmatched: OK, in quota mode too
	}
	resolveLimits(domain, req, resp.Statuses)
	if l.quota {
		for i := range resp.Statuses {
			st := &resp.Statuses[i]
			st.Quota = st.Limit == nil || !st.Limit.Unlimited
		}
	}
	atomic = l.atomic || domain.Atomic
	for i := range req.Descriptors {
		addOp(l, sc, domain, req, i, &resp.Statuses[i], atomic)
	}
	return atomic, nil
}

// takeAll decides sc.ops all or nothing, vetoes set to commit exactly when overall is OK.
func (l *Limiter) takeAll(ctx context.Context, sc *scratch, res []Result, st []Status) error {
	if l.all == nil {
		return fmt.Errorf("take all: %w", ErrNotAtomic)
	}
	// Quota descriptors fail only all together; an unlimited or shadowed one never does.
	quotaCanFail := true
	for i := range st {
		if st[i].Quota && !st[i].Refund && (st[i].Limit == nil || st[i].Limit.Unlimited || st[i].Limit.ShadowMode) {
			quotaCanFail = false // one that always passes
		}
	}
	for j := range sc.ops {
		st := &st[sc.index[j]]
		switch {
		case sc.ops[j].Refund:
			sc.ops[j].Veto = VetoNone // always allowed: vetoes nothing
		case st.Limit.ShadowMode, st.Quota && !quotaCanFail:
			sc.ops[j].Veto = VetoNone
		case st.Quota:
			sc.ops[j].Veto = VetoGroup
		}
	}
	if !slices.ContainsFunc(sc.ops, func(op Op) bool { return op.Refund }) {
		if err := l.all.TakeAll(ctx, sc.ops, res); err != nil {
			return fmt.Errorf("take all: %w", err)
		}
		return nil
	}
	return l.takeRefundsApart(ctx, sc.ops, res)
}

// takeRefundsApart takes the refunds among ops first, in a call of their
// own, then the rest all or nothing: a refund lands whatever the request
// answers, as envoyproxy/ratelimit applies refunds under
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (#1140). A refund gives back
// what an earlier request was charged: dropped with a rejected request,
// it would be lost. The ops of one descriptor are all refunds or none.
func (l *Limiter) takeRefundsApart(ctx context.Context, ops []Op, res []Result) error {
	var refunds, rest []int
	for j := range ops {
		if ops[j].Refund {
			refunds = append(refunds, j)
		} else {
			rest = append(rest, j)
		}
	}
	for _, part := range []struct {
		idx  []int
		take func(context.Context, []Op, []Result) error
	}{{refunds, l.store.Take}, {rest, l.all.TakeAll}} {
		if len(part.idx) == 0 {
			continue
		}
		sub, subRes := make([]Op, len(part.idx)), make([]Result, len(part.idx))
		for k, j := range part.idx {
			sub[k] = ops[j]
		}
		if err := part.take(ctx, sub, subRes); err != nil {
			return fmt.Errorf("take all: %w", err)
		}
		for k, j := range part.idx {
			res[j] = subRes[k]
		}
	}
	return nil
}

// resolveLimits sets each status's limit: the override or the matched rule,
// less those another limit of the request replaces.
func resolveLimits[E descriptors.KV](d *descriptors.Domain, req *Request[E], st []Status) {
	replacing := false
	for i := range req.Descriptors {
		rd := &req.Descriptors[i]
		if rd.Override != nil {
			lim := descriptors.NewLimit(rd.Override.RequestsPerUnit, rd.Override.Unit)
			lim.Path = d.Name + ".override"
			st[i].Limit = lim
			continue
		}
		st[i].Limit = descriptors.Match(d, rd.Entries)
		if st[i].Limit != nil && st[i].Limit.Replacing() {
			replacing = true
		}
	}
	if !replacing {
		return
	}
	for i := range st {
		lim := st[i].Limit
		switch {
		case lim == nil:
		case lim.Group == nil:
			if lim.Name != "" && replaced(st, lim.Name) {
				st[i].Limit, st[i].Replaced = nil, true
			}
		default:
			dropGroup(st, &st[i])
		}
	}
}

// dropGroup drops the limits of st's Group that st's request replaces; st
// keeps the first left, or none (Replaced).
func dropGroup(sts []Status, st *Status) {
	group := st.Limit.Group
	for k, m := range group {
		if m.Name != "" && replaced(sts, m.Name) {
			st.dropped |= 1 << k
		}
	}
	for k, m := range group {
		if st.dropped&(1<<k) == 0 {
			st.Limit = m
			return
		}
	}
	st.Limit, st.Replaced, st.dropped = nil, true, 0
}

// replaced reports whether a limit in force of sts replaces name.
func replaced(sts []Status, name string) bool {
	for i := range sts {
		lim := sts[i].Limit
		switch {
		case lim == nil:
		case lim.Group == nil:
			if slices.Contains(lim.Replaces, name) {
				return true
			}
		default:
			for k, m := range lim.Group {
				if sts[i].dropped&(1<<k) == 0 && slices.Contains(m.Replaces, name) {
					return true
				}
			}
		}
	}
	return false
}

// addOp queues descriptor i's store decision, or settles it without one.
func addOp[E descriptors.KV](l *Limiter, sc *scratch, d *descriptors.Domain, req *Request[E], i int, st *Status, atomic bool) {
	lim := st.Limit
	if lim == nil {
		return
	}
	st.Quota = st.Quota || lim.QuotaMode
	rd := &req.Descriptors[i]
	hits := uint64(req.HitsAddend)
	if hits == 0 {
		hits = 1
	}
	if rd.HasHits {
		hits = rd.Hits
	}
	st.Hits, st.Refund = hits, rd.Refund
	if lim.Unlimited {
		st.Remaining = math.MaxUint32
		return
	}
	if lim.Group == nil {
		appendOp(l, sc, d, rd, i, lim, hits, atomic, false)
		return
	}
	joined := false
	for k, m := range lim.Group {
		if st.dropped&(1<<k) == 0 {
			appendOp(l, sc, d, rd, i, m, hits, atomic, joined)
			joined = true
		}
	}
}

// appendOp queues the op of limit lim for descriptor i, joined to the op
// before it when joined.
func appendOp[E descriptors.KV](l *Limiter, sc *scratch, d *descriptors.Domain, rd *Descriptor[E], i int,
	lim *descriptors.Limit, hits uint64, atomic, joined bool) {
	cost := int64(maxCost)
	if hits <= maxCost/uint64(lim.Cost) {
		cost = int64(hits) * lim.Cost
	}
	if atomic {
		sc.key = AppendAtomicKey(sc.key[:0], l.prefix, d.Name, lim, rd.Entries, Tenant(d, rd.Entries))
	} else {
		sc.key = AppendKey(sc.key[:0], l.prefix, d.Name, lim, rd.Entries, Tenant(d, rd.Entries))
	}
	op := Op{
		Key:       string(sc.key),
		Algorithm: lim.Algorithm,
		Limit:     lim.Capacity(),
		Window:    lim.WindowMillis(),
		Cost:      cost,
		Refund:    rd.Refund,
		Burst:     lim.Burst,
		Joined:    joined,
		Debit:     lim.Charge == descriptors.ChargeAlways,
		Calendar:  lim.Periods(),
	}
	if lim.Algorithm == descriptors.TokenBucket {
		op.RateNum, op.RateDen = lim.RefillRate()
	}
	sc.ops = append(sc.ops, op)
	sc.index = append(sc.index, i)
	sc.limits = append(sc.limits, lim)
}

// Tenant returns the value of the domain's tenant entry, or DefaultTenant.
func Tenant[E descriptors.KV](d *descriptors.Domain, entries []E) string {
	if d.TenantKey == "" {
		return DefaultTenant
	}
	for _, e := range entries {
		if e.GetKey() == d.TenantKey && e.GetValue() != "" {
			return e.GetValue()
		}
	}
	return DefaultTenant
}

func applyResult(st *Status, r Result) {
	st.Remaining = uint32(min(r.Remaining/descriptors.Milli, math.MaxUint32))
	st.ResetMillis = r.Reset
	if r.Allowed || st.Refund { // a refund answers OK (one of 0 hits is a peek)
		return
	}
	st.RetryAfterMillis = r.RetryAfter
	if st.Limit.ShadowMode {
		st.Shadowed = true
		st.Remaining = 0
		return
	}
	st.Code = OverLimit
}

// overall is OVER_LIMIT when a non-quota descriptor is, or every quota one.
func overall(st []Status) Code {
	quota, quotaOver := 0, 0
	for i := range st {
		if st[i].Refund {
			continue // OK, and no part of a quota group
		}
		if st[i].Quota {
			quota++
			if st[i].Code == OverLimit {
				quotaOver++
			}
			continue
		}
		if st[i].Code == OverLimit {
			return OverLimit
		}
	}
	if quota > 0 && quotaOver == quota {
		return OverLimit
	}
	return OK
}
