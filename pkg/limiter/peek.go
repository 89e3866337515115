package limiter

import (
	"context"
	"fmt"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// Resetter is a Store that can forget limits' state, for operators who
// unblock an identifier. store.Redis and store.Memory are Resetters.
type Resetter interface {
	// Reset deletes the state of each op's Key, whatever its algorithm:
	// the window counters of op.Window that a fixed or sliding window
	// reads at the store's clock (the current and the previous one) and
	// the token bucket. The other fields of an op are ignored. It is
	// idempotent; its errors wrap ErrUnavailable.
	Reset(ctx context.Context, ops []Op) error
}

// Peeked is a request decided by Peek.
type Peeked struct {
	// Response holds what Check would answer now. Each status's
	// Remaining and ResetMillis are the state before the charge.
	Response
	// Keys are the base keys (AppendKey) of the statuses' limits (of a
	// rule with several, the one that decides), "" for descriptors that
	// take no store op (unmatched, unlimited, replaced).
	Keys []string
	// PartKeys are, of a descriptor whose rule has several limits, the
	// base key of each of its Parts, in their order; nil for the others
	// (nil itself when no descriptor has Parts).
	PartKeys [][]string
}

// Peek answers req as Check would at this moment, charging nothing: each
// op is sent as a peek (cost 0) and judged against the charge Check would
// make. An all-or-nothing domain's request is judged on the same answers,
// which it would commit only if OK. Errors are Check's.
func Peek[E descriptors.KV](ctx context.Context, l *Limiter, req *Request[E]) (*Peeked, error) {
	p := &Peeked{}
	sc := new(scratch)
	if _, err := prepare(l, req, &p.Response, sc); err != nil {
		return nil, err
	}
	costs := make([]int64, len(sc.ops))
	for j := range sc.ops {
		costs[j] = sc.ops[j].Cost
		sc.ops[j].Cost, sc.ops[j].Refund = 0, false
	}
	res := make([]Result, len(sc.ops))
	if len(sc.ops) > 0 {
		if err := l.store.Take(ctx, sc.ops, res); err != nil {
			return nil, fmt.Errorf("peek: %w", err)
		}
	}
	for j := range res {
		r := &res[j]
		// A charge passes when what remains covers it (take.lua's rules
		// for each algorithm, at cost 0: the remaining before it).
		r.Allowed = r.Allowed && r.Remaining >= costs[j]
		if !r.Allowed && r.RetryAfter == 0 {
			r.RetryAfter = r.Reset
		}
	}
	applyResults(sc, res, p.Statuses)
	p.Keys = make([]string, len(req.Descriptors))
	for j := range sc.ops {
		i := sc.index[j]
		st := &p.Statuses[i]
		if sc.limits[j] == st.Limit {
			p.Keys[i] = sc.ops[j].Key
		}
		if st.Parts != nil {
			if p.PartKeys == nil {
				p.PartKeys = make([][]string, len(req.Descriptors))
			}
			p.PartKeys[i] = append(p.PartKeys[i], sc.ops[j].Key)
		}
	}
	p.Code = overall(p.Statuses)
	return p, nil
}

// firstKeys returns the base key of each of n descriptors' first op in
// sc (of a rule with several limits, its first limit's), "" without one:
// Reset's answer.
func firstKeys(sc *scratch, n int) []string {
	keys := make([]string, n)
	for j := range sc.ops {
		if !sc.ops[j].Joined {
			keys[sc.index[j]] = sc.ops[j].Key
		}
	}
	return keys
}

// Reset clears on r the state of every descriptor of req that takes a
// store op (each limit of a rule with several), as Check would key it,
// and returns the descriptors' base keys (of a rule with several limits,
// its first's). Errors are Check's, or r's.
func Reset[E descriptors.KV](ctx context.Context, l *Limiter, r Resetter, req *Request[E]) ([]string, error) {
	var resp Response
	sc := new(scratch)
	if _, err := prepare(l, req, &resp, sc); err != nil {
		return nil, err
	}
	keys := firstKeys(sc, len(req.Descriptors))
	if len(sc.ops) == 0 {
		return keys, nil
	}
	if err := r.Reset(ctx, sc.ops); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	return keys, nil
}
