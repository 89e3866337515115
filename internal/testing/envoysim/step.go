package envoysim

import (
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
)

// Step runs what is due at the clock's time, in Envoy's order: expiries,
// the server's messages, then the report tick.
func (e *Envoy) Step() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	e.expire(now)
	e.keepalive(now)
	for {
		select {
		case m := <-e.inbox:
			e.receive(m, now)
			continue
		default:
		}
		break
	}
	e.applyDue(now)
	e.created(now)
	e.expire(now)
	if e.started && !now.Before(e.nextReport) {
		e.tick(now)
	}
}

// Settle waits (real time, up to timeout each) for the answers to every
// report sent, and reports false if one did not come.
func (e *Envoy) Settle(timeout time.Duration) bool {
	for {
		e.mu.Lock()
		n := len(e.awaiting)
		e.mu.Unlock()
		if n <= 0 {
			return true
		}
		if !e.Await(timeout) {
			e.mu.Lock()
			clear(e.awaiting)
			e.mu.Unlock()
			return false
		}
	}
}

// drain applies the messages waiting, at the clock's time, and returns
// how many there were.
func (e *Envoy) drain() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for {
		select {
		case m := <-e.inbox:
			e.receive(m, e.clock.Now())
			n++
		default:
			e.applyDue(e.clock.Now())
			return n
		}
	}
}

// messages counts what the Envoy sent and what it received.
func (e *Envoy) messages() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats.Subscriptions + e.stats.Reports + e.stats.Responses + e.stats.StreamsClosed
}

// Await waits up to timeout (real time) for one message from the server
// and applies it at the clock's time. It reports whether one came.
func (e *Envoy) Await(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-e.inbox:
		e.mu.Lock()
		e.receive(m, e.clock.Now())
		e.applyDue(e.clock.Now())
		e.mu.Unlock()
		return true
	case <-t.C:
		return false
	}
}

// tick is onSendReportsTimer: the report is built (counters reset) before
// the stream is checked, so a tick without a stream loses its usage.
func (e *Envoy) tick(now time.Time) {
	e.nextReport = now.Add(e.cfg.ReportPeriod)
	report := &rlqspb.RateLimitQuotaUsageReports{Domain: e.cfg.Domain}
	for _, b := range e.buckets {
		report.BucketQuotaUsages = append(report.BucketQuotaUsages, e.usage(b, now))
	}
	if e.stream == nil && !e.startStream() {
		e.stats.DroppedReports++
		return
	}
	e.stats.Reports++
	if e.send(report) {
		e.await(report)
	}
}

// receive takes one message of a stream as it arrives: a frame for the
// keepalive, an answer the fleet no longer waits for; it is applied
// Latency later (applyDue).
func (e *Envoy) receive(m message, now time.Time) {
	switch {
	case m.gen != e.streamGen || e.stream == nil:
	case m.err != nil:
		clear(e.awaiting) // nothing more will be answered on it
	default:
		e.ka.frame(now)
		for _, a := range m.resp.GetBucketAction() {
			delete(e.awaiting, Key(a.GetBucketId().GetBucket()))
		}
	}
	e.delayed = append(e.delayed, delayed{due: now.Add(e.cfg.Latency), m: m})
}

// applyDue applies the messages received Latency ago, in order.
func (e *Envoy) applyDue(now time.Time) {
	n := 0
	for n < len(e.delayed) && !now.Before(e.delayed[n].due) {
		e.handle(e.delayed[n].m, now)
		n++
	}
	e.delayed = append(e.delayed[:0], e.delayed[n:]...)
}

// handle applies one message of a stream.
func (e *Envoy) handle(m message, now time.Time) {
	if m.gen != e.streamGen || e.stream == nil {
		return // from a stream already gone
	}
	if m.err != nil {
		// onRemoteClose: the stream is forgotten; the next tick opens one.
		e.stats.StreamsClosed++
		e.cancel()
		e.stream = nil
		clear(e.awaiting)
		return
	}
	e.apply(m.resp, now)
}

// apply is onQuotaResponseImpl.
func (e *Envoy) apply(resp *rlqspb.RateLimitQuotaResponse, now time.Time) {
	e.stats.Responses++
	if len(resp.GetBucketAction()) == 0 {
		e.v.EmptyResponse++
		return
	}
	for _, a := range resp.GetBucketAction() {
		id := a.GetBucketId().GetBucket()
		if len(id) == 0 {
			e.v.MissingBucketID++
			continue
		}
		key := Key(id)
		b := e.buckets[key]
		if b == nil {
			e.v.UnknownBucket++
			continue
		}
		switch {
		case a.GetQuotaAssignmentAction() != nil:
			e.assign(b, a, now)
		case a.GetAbandonAction() != nil:
			delete(e.buckets, key)
			e.stats.Abandoned++
		default:
			// Cached as an action without a strategy, with a TTL of 0.
			e.v.NoAction++
			b.action, b.tb, b.fallback, b.expires = a, nil, false, now
		}
	}
}

// assign applies a quota assignment to a cached bucket.
func (e *Envoy) assign(b *bucket, a *rlqspb.RateLimitQuotaResponse_BucketAction, now time.Time) {
	qa := a.GetQuotaAssignmentAction()
	s := qa.GetRateLimitStrategy()
	var tb *tokenBucket
	switch {
	case s.GetStrategy() == nil:
		e.v.NoStrategy++
		return
	case s.GetRequestsPerTimeUnit() != nil:
		e.v.RequestsPerTimeUnit++
		return
	case s.GetTokenBucket() != nil:
		e.checkTokenBucket(s.GetTokenBucket())
		tb = e.tokenBucketFor(b, s, now, true)
	}
	ttl := qa.GetAssignmentTimeToLive().GetSeconds()
	switch {
	case ttl < 1:
		e.v.TTLUnderSecond++
		ttl = 0
	case time.Duration(ttl)*time.Second <= e.cfg.ReportPeriod:
		e.v.TTLNotAboveReport++
	}
	b.action, b.tb, b.fallback, b.assigned = proto.Clone(a).(*rlqspb.RateLimitQuotaResponse_BucketAction), tb, false, true
	b.expires = now.Add(time.Duration(ttl) * time.Second)
}

// checkTokenBucket counts the token-bucket fields Envoy misreads.
func (e *Envoy) checkTokenBucket(tb *typev3.TokenBucket) {
	if fillSeconds(tb) < 1 {
		e.v.FillIntervalUnderSecond++
	}
	if tb.GetTokensPerFill().GetValue() == 0 {
		e.v.NoTokensPerFill++
	}
	if tb.GetMaxTokens() == 0 {
		e.v.NoMaxTokens++
	}
}

// fillSeconds is absl::ToInt64Seconds(seconds + nanos), truncated.
func fillSeconds(tb *typev3.TokenBucket) int64 {
	d := time.Duration(tb.GetFillInterval().GetSeconds())*time.Second + time.Duration(tb.GetFillInterval().GetNanos())
	return int64(d / time.Second)
}

// tokenBucketFor returns b's own token bucket if shouldReplaceTokenBucket
// keeps it, else a new one; fromServer counts an unnoticed change.
func (e *Envoy) tokenBucketFor(b *bucket, s *typev3.RateLimitStrategy, now time.Time, fromServer bool) *tokenBucket {
	old := b.action.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	nb := s.GetTokenBucket()
	if old != nil && b.tb != nil && old.GetMaxTokens() == nb.GetMaxTokens() &&
		old.GetTokensPerFill().GetValue() == nb.GetTokensPerFill().GetValue() &&
		old.GetFillInterval().GetNanos() == nb.GetFillInterval().GetNanos() {
		if fromServer && fillSeconds(old) != fillSeconds(nb) {
			e.v.UnnoticedChange++
		}
		e.stats.KeptBuckets++
		return b.tb
	}
	if old != nil {
		e.stats.ReplacedBuckets++
	}
	return e.newTokenBucket(nb, b.tb, now)
}

// newTokenBucket is createTokenBucketFromAction: a replacement keeps the
// ratio of remaining to max tokens.
func (e *Envoy) newTokenBucket(tb *typev3.TokenBucket, old *tokenBucket, now time.Time) *tokenBucket {
	sec := e.secs(now)
	rate := float64(tb.GetTokensPerFill().GetValue()) / float64(fillSeconds(tb))
	max := uint64(tb.GetMaxTokens())
	initial := max
	if old != nil {
		initial = toUint64(float64(max) * (old.remaining(sec) / old.max))
		if e.cfg.Replace == ReplaceFullOrEmpty && initial != 0 {
			initial = max
		}
	}
	return newTokenBucket(max, rate, initial, sec)
}

// expire is onActionExpirationTimer and onFallbackExpirationTimer: the
// expired fallback for its timeout, then no_assignment_behavior.
func (e *Envoy) expire(now time.Time) {
	for _, b := range e.buckets {
		if b.expires.IsZero() || now.Before(b.expires) {
			continue
		}
		if b.fallback {
			e.stats.FallbackExpired++
			b.action, b.tb, b.fallback, b.expires = nil, nil, false, time.Time{}
			continue
		}
		e.stats.Expired++
		fb := b.expired
		if fb == nil || fb.Strategy == nil {
			b.action, b.tb, b.expires = nil, nil, time.Time{}
			continue
		}
		var tb *tokenBucket
		if fb.Strategy.GetTokenBucket() != nil {
			tb = e.tokenBucketFor(b, fb.Strategy, now, false)
		}
		b.action = &rlqspb.RateLimitQuotaResponse_BucketAction{
			BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					RateLimitStrategy: fb.Strategy,
				},
			},
		}
		b.tb, b.fallback = tb, true
		b.expires = now.Add(fb.Timeout.Truncate(time.Second))
	}
}
