package limiter

import "errors"

// ErrNoRules answers requests that arrive before any rules are loaded
// (rules over xDS with a forced start): the reference's message. Adapters
// return it instead of deciding, and observers count it apart from store
// failures.
var ErrNoRules = errors.New("no rate limit configuration loaded")

// View is a read-only look at a decided request's descriptors, for code
// that reports on decisions (metrics, stats, logs) without knowing how an
// adapter carries entries. Implementations must not allocate: they are
// called on every decision.
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
