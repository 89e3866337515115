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

var failureNames = [...]string{"error", "allow", "deny"}

// String is the policy's name, as ParseFailurePolicy reads it.
func (p FailurePolicy) String() string {
	if int(p) < len(failureNames) {
		return failureNames[p]
	}
	return fmt.Sprintf("FailurePolicy(%d)", p)
}

// ParseFailurePolicy parses "allow", "deny" or "error".
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	for i, n := range failureNames {
		if s == n {
			return FailurePolicy(i), nil
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
