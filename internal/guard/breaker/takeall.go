package breaker

import (
	"context"
	"fmt"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.AllOrNothingStore = (*Breaker)(nil)

// TakeAll is Take for all-or-nothing calls, sharing its failure count.
func (b *Breaker) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	all, ok := b.store.(limiter.AllOrNothingStore)
	if !ok {
		return fmt.Errorf("breaker: %T: %w", b.store, limiter.ErrNotAllOrNothing)
	}
	ticket, err := b.admit()
	if err != nil {
		return err
	}
	err = all.TakeAll(ctx, ops, results)
	b.record(ticket, err)
	return err
}
