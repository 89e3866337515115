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

// Backoff spaces the reconnects after a stream ends, as envoyproxy/ratelimit
// does: retry n (from 0) waits Initial·Factor^n within [Initial, Max], drawn
// uniformly from Initial up to that with Jitter. A Factor at or below 1
// (the default 0.5) always waits Initial.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Factor  float64
	Jitter  bool
}

// Delay returns the wait before retry n; rnd returns a number in [0, 1).
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

// jittered returns d give or take half, as the reference's connect retry.
func jittered(d time.Duration, rnd func() float64) time.Duration {
	return time.Duration(float64(d) * (0.5 + rnd()))
}
