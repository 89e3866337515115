package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/guard/breaker"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// failureCause is what a store failure is put down to, for its log line.
type failureCause uint8

// Causes of store failures.
const (
	causeError    failureCause = iota // the store answered with an error, or not at all
	causeFull                         // the embedded store is full (--memory-max-keys)
	causeOpen                         // the circuit breaker is open
	causeTimeout                      // --store-timeout or the caller's deadline passed
	causeCanceled                     // the caller went away
	numCauses
)

var causeNames = [numCauses]string{"store error", "memory store full", "circuit breaker open", "store timeout", "caller canceled"}

func causeOf(err error) failureCause {
	switch {
	case errors.Is(err, store.ErrFull):
		return causeFull
	case errors.Is(err, breaker.ErrOpen):
		return causeOpen
	case errors.Is(err, context.DeadlineExceeded):
		return causeTimeout
	case errors.Is(err, context.Canceled):
		return causeCanceled
	}
	return causeError
}

// failureLog is an rls.Observer that logs store failures at warn: at most
// one line a second per cause, with its reason and the count of failures
// of that cause that were not logged since the last line.
type failureLog struct {
	log    *zap.Logger
	policy string // --on-store-error, which answered them
	now    func() time.Time
	causes [numCauses]struct {
		last       atomic.Int64 // when its last line was written, Unix ns
		suppressed atomic.Int64
	}
}

func newFailureLog(log *zap.Logger, policy string) *failureLog {
	return &failureLog{log: log, policy: policy, now: time.Now}
}

// Decided logs nothing: a decision is no failure.
func (f *failureLog) Decided(string, limiter.View, *limiter.Response, time.Duration) {}

// GlobalShadowed logs nothing.
func (f *failureLog) GlobalShadowed() {}

// Failed logs a store failure, unless its cause's line is less than a
// second old; invalid requests and requests before any rules are no
// store failures.
func (f *failureLog) Failed(domain string, err error, _ time.Duration) {
	if errors.Is(err, limiter.ErrInvalid) || errors.Is(err, limiter.ErrNoRules) {
		return
	}
	cause := causeOf(err)
	c := &f.causes[cause]
	now := f.now().UnixNano()
	last := c.last.Load()
	if last != 0 && now-last < int64(time.Second) || !c.last.CompareAndSwap(last, now) {
		c.suppressed.Add(1)
		return
	}
	f.log.Warn("store failure: answered by --on-store-error", zap.String("cause", causeNames[cause]),
		zap.String("on_store_error", f.policy), zap.String(logDomain, domain), zap.Error(err),
		zap.Int64("suppressed", c.suppressed.Swap(0)))
}
