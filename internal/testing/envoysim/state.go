package envoysim

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// BucketState is what an Envoy holds for one bucket.
type BucketState struct {
	Cached bool // false for a bucket never seen or abandoned since
	// Strategy is the server's assignment, the expired fallback (Fallback),
	// or nil for no_assignment_behavior.
	Strategy *typev3.RateLimitStrategy
	Fallback bool
	Expires  time.Time // when the assignment (or fallback) lapses
	Tokens   float64   // what the token bucket holds now, if any
}

// State returns what the Envoy holds for a bucket id.
func (e *Envoy) State(id map[string]string) BucketState {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buckets[Key(id)]
	if b == nil {
		return BucketState{}
	}
	st := BucketState{Cached: true, Fallback: b.fallback, Expires: b.expires}
	if b.action != nil {
		st.Strategy = b.action.GetQuotaAssignmentAction().GetRateLimitStrategy()
	}
	if b.tb != nil {
		st.Tokens = b.tb.remaining(e.secs(e.clock.Now()))
	}
	return st
}

// Held is the rate the Envoy holds in a bucket, requests per second: its
// token bucket's, 0 under DENY_ALL or for a bucket it does not hold,
// +Inf under ALLOW_ALL (the server's, or no_assignment_behavior's).
func (e *Envoy) Held(id map[string]string) float64 {
	st := e.State(id)
	s := st.Strategy
	switch {
	case !st.Cached:
		return 0
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		return float64(tb.GetTokensPerFill().GetValue()) / float64(fillSeconds(tb))
	case s == nil, s.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL:
		return math.Inf(1)
	}
	return 0
}

// Violations returns the protocol rules the server broke so far.
func (e *Envoy) Violations() Violations { return locked(e, func() Violations { return e.v }) }

// Stats returns the Envoy's counts so far.
func (e *Envoy) Stats() Stats { return locked(e, func() Stats { return e.stats }) }

// Counts returns a bucket's requests over the Envoy's life.
func (e *Envoy) Counts(id map[string]string) Counts {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.counts[Key(id)]; c != nil {
		return *c
	}
	return Counts{}
}

// NextReport is when the Envoy's next report is due (zero before its
// first bucket).
func (e *Envoy) NextReport() time.Time { return locked(e, func() time.Time { return e.nextReport }) }

// Connected reports whether the Envoy has a stream open.
func (e *Envoy) Connected() bool { return locked(e, func() bool { return e.stream != nil }) }

// locked returns read's answer, read under the Envoy's lock.
func locked[T any](e *Envoy, read func() T) T {
	e.mu.Lock()
	defer e.mu.Unlock()
	return read()
}

// Close ends the Envoy's stream, for good, as when Envoy goes away.
func (e *Envoy) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	if e.stream != nil {
		_ = e.stream.CloseSend()
		e.cancel()
		e.stream = nil
	}
	close(e.done)
}
