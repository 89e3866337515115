package breaker

import (
	"context"
	"fmt"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.AtomicStore = (*Breaker)(nil)

// TakeAll forwards to the store's TakeAll unless the circuit is open, and
// counts the outcome as Take does: Take and TakeAll calls share one count
// of independent failures. A store that cannot decide all or nothing
// answers limiter.ErrNotAtomic, which leaves the circuit alone.
func (b *Breaker) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	all, ok := b.store.(limiter.AtomicStore)
	if !ok {
		return fmt.Errorf("breaker: %T: %w", b.store, limiter.ErrNotAtomic)
	}
	ticket, err := b.admit()
	if err != nil {
		return err
	}
	err = all.TakeAll(ctx, ops, results)
	b.record(ticket, err)
	return err
}
