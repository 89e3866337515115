package xds

import (
	"math"
	"time"
)

// Defaults of Backoff, as envoyproxy/ratelimit's XDS_CLIENT_BACKOFF_*.
const (
	DefaultBackoffInitial = 10 * time.Second
	DefaultBackoffMax     = 60 * time.Second
	DefaultBackoffFactor  = 0.5
)

// Backoff spaces the reconnects after a stream to the management server
// ends, with envoyproxy/ratelimit's semantics: the wait before retry n
// (from 0) is Initial·Factor^n, kept within [Initial, Max]; with Jitter it
// is drawn uniformly between Initial and that value. A Factor at or below
// 1 therefore waits Initial every time (the reference's default of 0.5
// does); a Factor of 2 doubles the wait up to Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Factor  float64
	Jitter  bool
}

// Delay returns the wait before retry n. rnd returns a number in [0, 1).
// Zero fields take the defaults.
func (b Backoff) Delay(n int, rnd func() float64) time.Duration {
	lo, hi, f := b.Initial, b.Max, b.Factor
	if lo <= 0 {
		lo = DefaultBackoffInitial
	}
	if hi <= 0 {
		hi = DefaultBackoffMax
	}
	if f <= 0 {
		f = DefaultBackoffFactor
	}
	if lo >= hi {
		return hi
	}
	d := float64(lo) * math.Pow(f, float64(n))
	if b.Jitter {
		d = float64(lo) + rnd()*(d-float64(lo))
	}
	switch {
	case d >= float64(hi):
		return hi
	case d <= float64(lo):
		return lo
	}
	return time.Duration(d)
}

// jittered returns d moved by up to half of itself either way, as the
// reference's connect retry interval is.
func jittered(d time.Duration, rnd func() float64) time.Duration {
	return time.Duration(float64(d) * (0.5 + rnd()))
}
