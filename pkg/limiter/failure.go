package limiter

import (
	"context"
	"fmt"
	"time"
)

// FailurePolicy is how an adapter answers requests while the store
// fails. The zero value is FailError.
type FailurePolicy uint8

// Failure policies.
const (
	// FailError answers the failure, so that the caller's own policy
	// (Envoy's failure_mode_deny) decides.
	FailError FailurePolicy = iota
	// FailAllow answers as if every descriptor were under its limit.
	FailAllow
	// FailDeny answers as if every descriptor were over its limit.
	FailDeny
)

// String is the policy's name, as ParseFailurePolicy reads it; a value
// that is no policy acts as FailError, and reads "error".
func (p FailurePolicy) String() string {
	switch p {
	case FailAllow:
		return "allow"
	case FailDeny:
		return "deny"
	}
	return "error"
}

// ParseFailurePolicy parses "allow", "deny" or "error".
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	for _, p := range []FailurePolicy{FailError, FailAllow, FailDeny} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%q is not allow, deny or error", s)
}

// DeadlineWithin reports whether ctx ends at most d after now: a timer
// bounding a call to d is then not needed.
func DeadlineWithin(ctx context.Context, now time.Time, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Sub(now) <= d
}
