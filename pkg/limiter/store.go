package limiter

import (
	"context"
	"errors"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

var (
	// ErrUnavailable marks store failures: no answer, or an error answer.
	ErrUnavailable = errors.New("store unavailable")
	// ErrNotAtomic answers an all-or-nothing request on a store that is no
	// AtomicStore: a wiring mistake, not a store failure.
	ErrNotAtomic = errors.New("store cannot decide all or nothing")
)

// Op is one decision for a Store to make atomically: charge Cost against the
// limit kept under Key, if it allows. Limit, Cost, Burst and Remaining are
// milli-requests (descriptors.Milli a request), times milliseconds.
type Op struct {
	// Key is the base key (AppendKey); the store appends its window's or bucket's suffix.
	Key       string
	Algorithm descriptors.Algorithm
	// Veto weighs a denial in AtomicStore.TakeAll; Take ignores it.
	Veto Veto
	// Limit is a window's capacity, or a token bucket's refill per Window.
	Limit  int64
	Window int64
	// Cost is the charge; 0 checks without charging.
	Cost int64
	// Refund gives Cost back, always allowed, never below empty nor past
	// Burst; Result holds what remains (docs/design.md has the details).
	Refund bool
	Burst  int64
	// RateNum/RateDen is the bucket's refill per ms (descriptors.Limit.RefillRate).
	RateNum, RateDen int64
	// Now is the decision time, Unix ms; 0 means the store's own clock.
	Now int64
	// Debit charges Cost even when it does not fit (descriptors.ChargeAlways):
	// the op is denied all the same, a sliding window then holds more than
	// its limit and a token bucket goes below zero (to -Burst at most), and
	// the same op is next allowed once its refill or sliding has paid the
	// debt back (RetryAfter). A fixed window counts a denied charge anyway;
	// in a joint, or a rejected TakeAll, a debit op is still charged.
	Debit bool
	// Calendar, if set, cuts a window op's time into its periods instead of
	// Window-long windows from the Unix epoch; Window is then only nominal.
	Calendar *descriptors.Calendar
	// Joined puts the op in one joint with the op before it: the ops of a
	// joint (a first op, then those Joined) are one decision, for the
	// several limits of one descriptor. Each is decided as alone, at one
	// Now, and answers so, but they are charged only if every one is
	// allowed; else none is written, not even a denied fixed-window hit.
	// Their keys share a Redis Cluster hash tag.
	Joined bool
}

// Result is a Store's answer to one Op.
type Result struct {
	Allowed    bool
	Remaining  int64 // left after this decision
	RetryAfter int64 // ms until the same Op could pass; 0 when allowed
	Reset      int64 // ms until the window ends or the bucket is full
}

// Store makes rate-limit decisions against shared state. Implementations
// must be safe for concurrent use and honour ctx's deadline. Take decides
// every op, each atomic on its own and independent of the others but for
// the ops of one joint (Op.Joined), which are atomic together (in one
// round trip, ideally), into results[i] (len(results) >= len(ops)); or it
// returns an error wrapping ErrUnavailable, and no result is usable.
type Store interface {
	Take(ctx context.Context, ops []Op, results []Result) error
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// AtomicStore is a Store that can also decide a call's ops all or nothing:
// TakeAll decides them in order at their one Now and answers as Take would,
// then commits, writing what Take would (nothing of a joint with a denied
// op), or rejects (Rejects) and writes nothing, not even a denied
// fixed-window hit. The call is one atomic step; on a Redis Cluster its
// keys share a slot (AppendAtomicKey). Errors are as Take's; after one,
// the call may or may not have committed.
type AtomicStore interface {
	Store
	TakeAll(ctx context.Context, ops []Op, results []Result) error
}

// Veto is how a denied op weighs in an all-or-nothing call; the limiter
// sets it so that a call commits exactly when the request answers OK.
type Veto uint8

// Vetoes.
const (
	VetoAlone Veto = iota // a denial rejects the call
	VetoNone              // a denial rejects nothing (shadow mode, refunds)
	VetoGroup             // the call is rejected when every VetoGroup joint has a denied op (quota mode)
)

// Rejects reports whether an all-or-nothing call with these results must
// write nothing. The ops of one joint (Op.Joined) share their Veto.
func Rejects(ops []Op, results []Result) bool {
	group, groupDenied := 0, 0
	denied := false // within the current VetoGroup joint
	for i := range ops {
		switch ops[i].Veto {
		case VetoAlone:
			if !results[i].Allowed {
				return true
			}
		case VetoGroup:
			if !ops[i].Joined || i == 0 {
				group++
				denied = false
			}
			if !results[i].Allowed && !denied {
				denied = true
				groupDenied++
			}
		}
	}
	return group > 0 && groupDenied == group
}
