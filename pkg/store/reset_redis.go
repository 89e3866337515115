package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.Resetter = (*Redis)(nil)

// resetScript is lua/reset.lua, sent by digest, then by source if Redis
// lacks it.
var resetScript = redis.NewScript(lua.Reset)

// Reset deletes the state of each op's key (limiter.Resetter) at Redis
// TIME, one script call per op, so that on a Cluster each goes to the slot
// of its key's hash tag.
func (r *Redis) Reset(ctx context.Context, ops []limiter.Op) error {
	for i := range ops {
		op := &ops[i]
		if err := checkReset(op); err != nil {
			return err
		}
		var windows any = op.Window
		if op.Calendar != nil {
			// The starts of the periods around this server's clock's: Redis'
			// current and previous periods among them.
			p := periods(op.Calendar, guessClock())
			windows = p.b[1] + " " + p.b[2] + " " + p.b[3]
		}
		if err := resetScript.Run(ctx, r.client, []string{op.Key}, windows).Err(); err != nil {
			return fmt.Errorf("redis reset: %w: %w", limiter.ErrUnavailable, err)
		}
	}
	return nil
}

// checkReset checks the one field of op that Reset reads.
func checkReset(op *limiter.Op) error {
	if op.Window <= 0 || op.Window > maxWindow || op.Window%1000 != 0 {
		return fmt.Errorf("%w: reset: window %d ms is not a whole number of seconds in range", ErrInvalidOp, op.Window)
	}
	return nil
}
