package quota

import (
	"math"
	"time"
)

// Envoy reads a token bucket assignment in whole seconds and integer
// tokens, and keeps its existing bucket when max_tokens, tokens_per_fill
// and fill_interval's nanos are unchanged (docs/rlqs.md). TokenBucket is
// an assignment in those terms.
type TokenBucket struct {
	MaxTokens     uint32
	TokensPerFill uint32
	// FillSeconds is fill_interval in whole seconds, >= 1.
	FillSeconds int64
}

// precisionTokens is the smallest tokens_per_fill Encode aims for, so that
// the integer rounding of a rate costs under 1%.
const precisionTokens = 100

// maxFillSeconds bounds the fill interval Encode picks for precision; a
// slower rate still gets one token per ceil(1/rate) seconds.
const maxFillSeconds = 3600

// Encode returns the token bucket that refills at rate requests per second
// (never faster) and holds burst requests (at least one). Refill in Envoy
// is continuous at tokens_per_fill / fill_interval, so the interval only
// sets the precision: it is 1s for rates of 100/s and more, and longer
// below, up to an hour, so that tokens_per_fill stays near 100 or more;
// a rate under one per hour gets one token per ceil(1/rate) seconds. It
// reports false for a rate that is not positive: that share admits
// nothing (a DENY_ALL).
func Encode(rate, burst float64) (TokenBucket, bool) {
	if !(rate > 0) {
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

func clampUint32(f float64) uint32 {
	switch {
	case !(f >= 1):
		return 1
	case f >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(f)
}

// Rate is the bucket's refill rate in requests per second, as Envoy
// computes it.
func (tb TokenBucket) Rate() float64 {
	return float64(tb.TokensPerFill) / float64(tb.FillSeconds)
}

// FillNanos is the nanos to send with FillSeconds: the seconds again, as
// nanoseconds. Envoy truncates the interval to whole seconds, so they do
// not change the rate, but it compares only the nanos to decide whether
// an assignment changed; this way a change of the seconds is seen.
func (tb TokenBucket) FillNanos() int32 {
	return int32(tb.FillSeconds % 1_000_000_000)
}

// TTL is an assignment's time to live in whole seconds: factor report
// periods, rounded up, and at least one second more than one period, so
// that an assignment outlives factor-1 missed reports.
func TTL(period time.Duration, factor float64) int64 {
	ttl := int64(math.Ceil(period.Seconds() * factor))
	return max(ttl, int64(math.Ceil(period.Seconds()))+1)
}
