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

// count is one of Violations' counts, named as String names it.
type count struct {
	name string
	n    *int
}

// counts names each count of v, in the order String lists them.
func (v *Violations) counts() []count {
	return []count{
		{"empty_response", &v.EmptyResponse},
		{"missing_bucket_id", &v.MissingBucketID},
		{"unknown_bucket", &v.UnknownBucket},
		{"no_action", &v.NoAction},
		{"no_strategy", &v.NoStrategy},
		{"requests_per_time_unit", &v.RequestsPerTimeUnit},
		{"fill_interval_under_second", &v.FillIntervalUnderSecond},
		{"no_tokens_per_fill", &v.NoTokensPerFill},
		{"no_max_tokens", &v.NoMaxTokens},
		{"ttl_under_second", &v.TTLUnderSecond},
		{"ttl_not_above_report", &v.TTLNotAboveReport},
		{"unnoticed_change", &v.UnnoticedChange},
	}
}

// Total is the number of violations.
func (v Violations) Total() int {
	n := 0
	for _, c := range v.counts() {
		n += *c.n
	}
	return n
}

// Add returns the sum of v and w.
func (v Violations) Add(w Violations) Violations {
	sum, add := v, w.counts()
	for i, c := range sum.counts() {
		*c.n += *add[i].n
	}
	return sum
}

// String lists the non-zero counts, or "none".
func (v Violations) String() string {
	var parts []string
	for _, c := range v.counts() {
		if *c.n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", c.name, *c.n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
