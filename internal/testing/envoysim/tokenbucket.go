package envoysim

import "math"

// minFillRate is AtomicTokenBucketImpl's kMinFillRate: one token a year.
const minFillRate = 1.0 / (365 * 24 * 60 * 60)

// tokenBucket is Envoy's AtomicTokenBucketImpl: it holds min(max,
// (t - empty) * rate) tokens at t, in seconds, with C++'s std::min and
// std::max, so the +Inf and NaN rates of a sub-second fill interval let
// every request pass, as in Envoy.
type tokenBucket struct {
	max   float64
	rate  float64 // tokens per second, std::max(|rate|, kMinFillRate)
	empty float64 // seconds
}

// newTokenBucket builds a bucket holding initial tokens at now (seconds).
func newTokenBucket(max uint64, rate float64, initial uint64, now float64) *tokenBucket {
	tb := &tokenBucket{max: float64(max), rate: cppMax(math.Abs(rate), minFillRate), empty: now}
	if initial != 0 {
		tb.empty -= float64(initial) / tb.rate
	}
	return tb
}

// consume takes one token if there is one.
func (tb *tokenBucket) consume(now float64) bool {
	total := cppMin(tb.max, (now-tb.empty)*tb.rate)
	if !(total >= 1) {
		return false
	}
	tb.empty = now - (total-1)/tb.rate
	return true
}

// remaining is remainingTokens.
func (tb *tokenBucket) remaining(now float64) float64 {
	return cppMin(tb.max, (now-tb.empty)*tb.rate)
}

// cppMin is std::min(a, b): b if b < a, else a (so a NaN b yields a).
func cppMin(a, b float64) float64 {
	if b < a {
		return b
	}
	return a
}

// cppMax is std::max(a, b): b if a < b, else a (so a NaN a yields a).
func cppMax(a, b float64) float64 {
	if a < b {
		return b
	}
	return a
}

// toUint64 is a C++ double-to-uint64 cast: truncation; 0 for NaN and
// negatives (undefined in C++).
func toUint64(f float64) uint64 {
	if !(f > 0) {
		return 0
	}
	if f >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(f)
}
