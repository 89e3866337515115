package limiter

import (
	"context"
	"errors"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// Op is one decision for a Store to make atomically: charge Cost against
// the limit kept under Key, if the limit allows it.
//
// All quantities are integers: Limit, Cost, Burst and Result.Remaining are
// in milli-requests (descriptors.Milli per request), times in milliseconds.
type Op struct {
	// Key is the base key, "{prefix}:{identifier}:{tenant}:" with a Redis
	// Cluster hash tag around the identifier. The store appends the window
	// start in Unix seconds (fixed and sliding windows) or "bucket".
	Key string
	// Algorithm selects the semantics described on the constants in
	// package descriptors and in lua/*.lua.
	Algorithm descriptors.Algorithm
	// Limit is the window's capacity (windows) or the refill per Window
	// (token bucket), in milli-requests.
	Limit int64
	// Window is the window length in milliseconds.
	Window int64
	// Cost is the charge in milli-requests; 0 checks without charging.
	Cost int64
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

// ErrUnavailable marks store failures: the backend did not answer, or
// answered with an error.
var ErrUnavailable = errors.New("store unavailable")
