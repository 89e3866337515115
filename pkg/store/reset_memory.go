package store

import (
	"context"
	"fmt"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.Resetter = (*Memory)(nil)

// Reset deletes the state of each op's key (limiter.Resetter) at the
// store's clock, as Redis.Reset does.
func (m *Memory) Reset(ctx context.Context, ops []limiter.Op) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory reset: %w: %w", limiter.ErrUnavailable, err)
	}
	for i := range ops {
		if err := checkReset(&ops[i]); err != nil {
			return err
		}
	}
	now := m.now().UnixMilli()
	for i := range ops {
		op := &ops[i]
		ws, _ := window(op, now)
		s := &m.shards[m.shardOf(op.Key)]
		s.mu.Lock()
		s.dropWindow(windowKey{op.Key, ws})
		s.dropWindow(windowKey{op.Key, windowBefore(op, ws)})
		s.dropBucket(op.Key)
		s.mu.Unlock()
	}
	return nil
}
