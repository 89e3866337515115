package quota

import (
	"math"
	"time"
)

// TokenBucket is an assignment as Envoy reads it: whole seconds, integer tokens.
type TokenBucket struct {
	MaxTokens     uint32
	TokensPerFill uint32
	FillSeconds   int64 // fill_interval, >= 1
}

const (
	precisionTokens = 100  // the least tokens_per_fill Encode aims for: under 1% rounding
	maxFillSeconds  = 3600 // the longest fill interval Encode picks for precision
	// minRate is the least rate Encode encodes, a request a year: below,
	// the interval would overflow Envoy's durations.
	minRate = 1.0 / (366 * 86400)
)

// Encode returns the bucket refilling at rate requests a second (never more,
// within 1%) holding burst; false for a rate that admits nothing (DENY_ALL),
// or under a request a year.
func Encode(rate, burst float64) (TokenBucket, bool) {
	if !Encodes(rate) {
		return TokenBucket{}, false
	}
	sec := int64(1)
	if rate < precisionTokens {
		sec = min(int64(math.Ceil(precisionTokens/rate)), maxFillSeconds)
		if rate*float64(sec) < 1 {
			sec = int64(math.Ceil(1 / rate))
		}
	}
	perFill := math.Floor(rate * float64(sec) * (1 + 1e-9))
	return TokenBucket{
		MaxTokens:     clampUint32(math.Ceil(burst)),
		TokensPerFill: clampUint32(perFill),
		FillSeconds:   sec,
	}, true
}

// Encodes reports whether Encode makes a token bucket of rate: false for
// the rates sent as DENY_ALL.
func Encodes(rate float64) bool { return rate >= minRate }

func clampUint32(f float64) uint32 {
	switch {
	case !(f >= 1):
		return 1
	case f >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(f)
}

// Rate is the refill rate in requests per second, as Envoy computes it.
func (tb TokenBucket) Rate() float64 {
	return float64(tb.TokensPerFill) / float64(tb.FillSeconds)
}

// FillNanos is FillSeconds again as nanos, which Envoy compares to see a change.
func (tb TokenBucket) FillNanos() int32 {
	return int32(tb.FillSeconds % 1_000_000_000)
}

// TTL is an assignment's time to live: factor periods in whole seconds, over one period.
func TTL(period time.Duration, factor float64) int64 {
	ttl := int64(math.Ceil(period.Seconds() * factor))
	return max(ttl, int64(math.Ceil(period.Seconds()))+1)
}
