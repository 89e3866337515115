package envoysim

import (
	"fmt"
	"strings"
)

// Violations counts the protocol rules a server broke, as seen by one
// Envoy. Each field names what Envoy does with such a message.
type Violations struct {
	// EmptyResponse: a response without actions (ignored; FastLimit never sends one).
	EmptyResponse int
	// MissingBucketID: an action without a bucket id, or an empty one (dropped).
	MissingBucketID int
	// UnknownBucket: an action for a bucket the Envoy does not hold (dropped).
	UnknownBucket int
	// NoAction: neither an assignment nor an abandon (allows all, expires at once).
	NoAction int
	// NoStrategy: an assignment without a strategy (dropped).
	NoStrategy int
	// RequestsPerTimeUnit: a strategy Envoy does not implement (dropped).
	RequestsPerTimeUnit int
	// FillIntervalUnderSecond: fill_interval under 1 s (the rate divides by zero: all pass).
	FillIntervalUnderSecond int
	// NoTokensPerFill: tokens_per_fill unset or 0 (one token a year).
	NoTokensPerFill int
	// NoMaxTokens: max_tokens 0 (denies everything; DENY_ALL says that).
	NoMaxTokens int
	// TTLUnderSecond: assignment_time_to_live unset or under 1 s (expires at once).
	TTLUnderSecond int
	// TTLNotAboveReport: a TTL within the report period (lapses between reports).
	TTLNotAboveReport int
	// UnnoticedChange: a change of fill_interval's seconds alone (Envoy keeps the bucket).
	UnnoticedChange int
}

// Total is the number of violations.
func (v Violations) Total() int {
	return v.EmptyResponse + v.MissingBucketID + v.UnknownBucket + v.NoAction + v.NoStrategy +
		v.RequestsPerTimeUnit + v.FillIntervalUnderSecond + v.NoTokensPerFill + v.NoMaxTokens +
		v.TTLUnderSecond + v.TTLNotAboveReport + v.UnnoticedChange
}

// Add returns the sum of v and w.
func (v Violations) Add(w Violations) Violations {
	return Violations{
		EmptyResponse:           v.EmptyResponse + w.EmptyResponse,
		MissingBucketID:         v.MissingBucketID + w.MissingBucketID,
		UnknownBucket:           v.UnknownBucket + w.UnknownBucket,
		NoAction:                v.NoAction + w.NoAction,
		NoStrategy:              v.NoStrategy + w.NoStrategy,
		RequestsPerTimeUnit:     v.RequestsPerTimeUnit + w.RequestsPerTimeUnit,
		FillIntervalUnderSecond: v.FillIntervalUnderSecond + w.FillIntervalUnderSecond,
		NoTokensPerFill:         v.NoTokensPerFill + w.NoTokensPerFill,
		NoMaxTokens:             v.NoMaxTokens + w.NoMaxTokens,
		TTLUnderSecond:          v.TTLUnderSecond + w.TTLUnderSecond,
		TTLNotAboveReport:       v.TTLNotAboveReport + w.TTLNotAboveReport,
		UnnoticedChange:         v.UnnoticedChange + w.UnnoticedChange,
	}
}

// String lists the non-zero counts, or "none".
func (v Violations) String() string {
	var parts []string
	add := func(name string, n int) {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, n))
		}
	}
	add("empty_response", v.EmptyResponse)
	add("missing_bucket_id", v.MissingBucketID)
	add("unknown_bucket", v.UnknownBucket)
	add("no_action", v.NoAction)
	add("no_strategy", v.NoStrategy)
	add("requests_per_time_unit", v.RequestsPerTimeUnit)
	add("fill_interval_under_second", v.FillIntervalUnderSecond)
	add("no_tokens_per_fill", v.NoTokensPerFill)
	add("no_max_tokens", v.NoMaxTokens)
	add("ttl_under_second", v.TTLUnderSecond)
	add("ttl_not_above_report", v.TTLNotAboveReport)
	add("unnoticed_change", v.UnnoticedChange)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
