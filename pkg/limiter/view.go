package limiter

import "errors"

// ErrNoRules answers requests before any rules are loaded (xDS with a
// forced start), with the reference's message; observers count it apart.
var ErrNoRules = errors.New("no rate limit configuration loaded")

// View is a read-only look at a decided request's descriptors, for
// observers that do not know how an adapter carries entries.
// Implementations must not allocate: they run on every decision.
type View interface {
	// Len is the number of descriptors, one per status.
	Len() int
	// Entries is the number of entries of descriptor i.
	Entries(i int) int
	// Entry returns entry j of descriptor i.
	Entry(i, j int) (key, value string)
	// Override reports whether descriptor i carried a limit override.
	Override(i int) bool
}
