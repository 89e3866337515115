package rlqs

import (
	"context"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// worker is a report's hold on one of Options.ReportWorkers' slots. The
// slots bound the reports being worked on, not those waiting on the
// demand store: a report gives its slot up for each store round trip and
// waits for one again after it, so that the bound is on the CPU quota
// work takes, and a slow store does not leave the reports behind it
// waiting for slots nobody works in. It belongs to one goroutine.
type worker struct {
	slots chan struct{}
	held  bool
	done  <-chan struct{} // its stream's end
}

type workerKey struct{}

// withWorker is ctx, a stream's, carrying w for the store calls of the
// report it handles.
func withWorker(ctx context.Context, w *worker) context.Context {
	w.done = ctx.Done()
	return context.WithValue(ctx, workerKey{}, w)
}

// release gives the slot up, if held.
func (w *worker) release() {
	if w.held {
		<-w.slots
		w.held = false
	}
}

// acquire waits for a slot, until the stream ends (the report's
// handling then goes on without one: what is left of it is short).
func (w *worker) acquire() {
	select {
	case w.slots <- struct{}{}:
		w.held = true
	case <-w.done:
	}
}

// storeExchange is the demand store's Exchange, the caller's worker slot
// given up for its round trip.
func (s *Service) storeExchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	if w, _ := ctx.Value(workerKey{}).(*worker); w != nil && w.held {
		w.release()
		defer w.acquire()
	}
	return s.opts.Store.Exchange(ctx, items, ttl, now)
}
