package envoysim

import (
	"fmt"
	"strings"
)

// Violations counts the protocol rules a server broke, as seen by one
// Envoy. Each field names what Envoy does with such a message.
type Violations struct {
	// EmptyResponse: a response without bucket actions (Envoy ignores it;
	// FastLimit's rule is never to send one).
	EmptyResponse int
	// MissingBucketID: an action without a bucket id, or an empty one
	// (dropped by onQuotaResponseImpl).
	MissingBucketID int
	// UnknownBucket: an action for a bucket id the stream's Envoy does not
	// hold: never reported, or abandoned since (dropped).
	UnknownBucket int
	// NoAction: an action with neither a quota assignment nor an abandon
	// (cached without a strategy: allows everything, expires at once).
	NoAction int
	// NoStrategy: a quota assignment without a rate-limit strategy
	// (dropped).
	NoStrategy int
	// RequestsPerTimeUnit: a requests_per_time_unit strategy (not
	// implemented by Envoy: dropped).
	RequestsPerTimeUnit int
	// FillIntervalUnderSecond: a token bucket whose fill_interval is under
	// one whole second (the rate divides by zero: everything passes).
	FillIntervalUnderSecond int
	// NoTokensPerFill: a token bucket without tokens_per_fill, or 0 (the
	// rate becomes one token a year).
	NoTokensPerFill int
	// NoMaxTokens: a token bucket of max_tokens 0 (denies everything; a
	// server meaning that sends DENY_ALL).
	NoMaxTokens int
	// TTLUnderSecond: an assignment_time_to_live unset or under one whole
	// second (the assignment expires at once).
	TTLUnderSecond int
	// TTLNotAboveReport: a TTL no longer than the report period, so that
	// the assignment lapses between two reports.
	TTLNotAboveReport int
	// UnnoticedChange: a token bucket that differs from the cached one in
	// fill_interval's seconds alone (Envoy keeps the old bucket).
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
