package limiter

import (
	"context"
	"errors"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

var (
	// ErrUnavailable marks store failures: the backend did not answer, or
	// answered with an error.
	ErrUnavailable = errors.New("store unavailable")
	// ErrNotAtomic is returned for a request of an all-or-nothing domain
	// when the store does not implement AtomicStore: a wiring mistake, not
	// a store failure.
	ErrNotAtomic = errors.New("store cannot decide all or nothing")
)

// Op is one decision for a Store to make atomically: charge Cost against
// the limit kept under Key, if the limit allows it.
//
// All quantities are integers: Limit, Cost, Burst and Result.Remaining are
// in milli-requests (descriptors.Milli per request), times in milliseconds.
type Op struct {
	// Key is the base key, "{prefix}:{identifier}:{tenant}:" with a Redis
	// Cluster hash tag around the identifier. The store appends the window
	// start in Unix seconds (fixed and sliding windows) or "tokens" (token
	// bucket; lua/take.lua lays out the state).
	Key string
	// Algorithm selects the semantics described on the constants in
	// package descriptors and in lua/*.lua.
	Algorithm descriptors.Algorithm
	// Veto says how a denial of this op weighs in an all-or-nothing call
	// (AtomicStore.TakeAll); Take ignores it.
	Veto Veto
	// Limit is the window's capacity (windows) or the refill per Window
	// (token bucket), in milli-requests.
	Limit int64
	// Window is the window length in milliseconds.
	Window int64
	// Cost is the charge in milli-requests; 0 checks without charging.
	Cost int64
	// Refund gives Cost back instead of charging it: a window's count
	// drops by it (this window's counter, for a sliding window), never
	// below 0; a token bucket, refilled to Now first, gains it, never
	// past Burst. A refund is always allowed; its Result holds what
	// remains after it (Remaining at most Limit, or Burst), with
	// RetryAfter 0. It writes only state that exists (a missing window
	// stays missing, a full bucket full), keeping its expiry, save that a
	// counter emptied and a bucket made full are deleted, and a bucket
	// still short expires when full. A refund of Cost 0 is a peek.
	Refund bool
	// Burst is the token bucket's capacity in milli-requests.
	Burst int64
	// RateNum/RateDen is the token bucket's refill rate as a reduced
	// fraction of milli-tokens per millisecond (see Limit.RefillRate).
	RateNum, RateDen int64
	// Now is the decision time in Unix milliseconds; 0 means the store's own
	// clock (Redis TIME inside the script). Tests step time with it.
	Now int64
}

// Result is a Store's answer to one Op.
type Result struct {
	Allowed bool
	// Remaining is what is left after this decision, in milli-requests.
	Remaining int64
	// RetryAfter is how long until the same Op could be allowed, in ms
	// (0 when allowed).
	RetryAfter int64
	// Reset is the time until the window ends (windows) or the bucket is
	// full again (token bucket), in ms.
	Reset int64
}

// Store makes rate-limit decisions against shared state.
//
// Implementations must be safe for concurrent use. Take decides every op
// in ops and writes results[i] for ops[i]; len(results) >= len(ops). Each op
// is atomic on its own; ops of one call are independent of each other, and
// a Store should send them in one network round trip. Take either decides
// every op and returns nil, or returns an error wrapping ErrUnavailable,
// in which case no result may be used. Take honours ctx's deadline.
type Store interface {
	Take(ctx context.Context, ops []Op, results []Result) error
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// AtomicStore is a Store that can also decide a call's ops all or nothing,
// for the domains that ask for it (atomic: true, or Options.Atomic).
//
// TakeAll decides every op at one instant, the Now of the ops (all ops of
// a call must carry the same Now), in order, each op seeing the charges
// (and refunds) of the ops before it, exactly as Take would. A refund is
// always allowed, so it vetoes nothing; its writes land only if the call
// commits, with the rest. Then it either commits, and
// writes what Take would have written, or rejects, and writes nothing at
// all: not even a fixed window's count of a denied hit. It rejects when an
// op with VetoAlone is denied, or when the call has VetoGroup ops and every
// one of them is denied; denials of VetoNone ops reject nothing. Peeks
// (Cost 0) never write.
//
// results[i] is the answer Take would have given ops[i] in that order,
// whether the call committed or not: an allowed op of a rejected call
// reports the Remaining it would have had, its charge included.
//
// The whole decision is one atomic step: concurrent calls on the same keys
// see either all of a call's charges or none. In Redis Cluster every key of
// a call must hash to one slot (AppendAtomicKey's hash tag does that).
// Errors are as Take's; after an error no result may be used, and the call
// may or may not have committed (a Redis reply lost after the script ran).
type AtomicStore interface {
	Store
	TakeAll(ctx context.Context, ops []Op, results []Result) error
}

// Veto is how a denied op weighs in an all-or-nothing call. The limiter
// derives it from the descriptor's limit so that a call commits exactly
// when the request's overall answer is OK.
type Veto uint8

// Vetoes.
const (
	// VetoAlone: a denial of this op rejects the call (the zero value).
	VetoAlone Veto = iota
	// VetoNone: a denial of this op rejects nothing (shadow mode; quota
	// descriptors when a request's quota descriptors cannot all be over).
	VetoNone
	// VetoGroup: the call is rejected when every VetoGroup op of it is
	// denied (quota mode: a request is over when all its quota
	// descriptors are).
	VetoGroup
)

// Rejects reports whether an all-or-nothing call of ops whose verdicts are
// results must write nothing (see AtomicStore).
func Rejects(ops []Op, results []Result) bool {
	group, groupDenied := 0, 0
	for i := range ops {
		switch ops[i].Veto {
		case VetoAlone:
			if !results[i].Allowed {
				return true
			}
		case VetoGroup:
			group++
			if !results[i].Allowed {
				groupDenied++
			}
		}
	}
	return group > 0 && groupDenied == group
}
