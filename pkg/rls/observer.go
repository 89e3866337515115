package rls

import (
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Observer is told of every decision, for metrics and stats. Its methods
// must be cheap, must not block, and must be safe for concurrent use.
type Observer interface {
	// Decided is called after a decision of domain with its time taken;
	// req shows the request's descriptors, one per status of res. It must
	// keep neither req nor res, which are reused once it returns.
	Decided(domain string, req limiter.View, res *limiter.Response, took time.Duration)
	// Failed is called when a request fails: err wraps limiter.ErrInvalid,
	// limiter.ErrNoRules, or else is a store failure.
	Failed(domain string, err error, took time.Duration)
	// GlobalShadowed is called when global shadow mode passes a request
	// over limit.
	GlobalShadowed()
}

// Observers tells each of its observers, in order; nil tells none.
type Observers []Observer

var _ Observer = Observers(nil)

func (os Observers) Decided(domain string, req limiter.View, res *limiter.Response, took time.Duration) {
	for _, o := range os {
		o.Decided(domain, req, res, took)
	}
}

func (os Observers) Failed(domain string, err error, took time.Duration) {
	for _, o := range os {
		o.Failed(domain, err, took)
	}
}

func (os Observers) GlobalShadowed() {
	for _, o := range os {
		o.GlobalShadowed()
	}
}
