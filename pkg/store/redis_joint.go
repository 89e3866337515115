package store

import (
	"context"
	"sync/atomic"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// takeJoints decides a call that holds joints (limiter.Op.Joined) in
// lua/takeall.lua calls (jointCalls), in order, every op vetoing nothing:
// each call commits, and each joint writes only if all its ops are
// allowed. The calls go out in one pipeline, detached as Take's sends.
func (r *Redis) takeJoints(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	all := make([]limiter.Op, len(ops))
	for i := range ops {
		all[i] = ops[i]
		all[i].Veto = limiter.VetoNone
	}
	return r.detached(ctx, "take", all, results, r.takeJointCalls)
}

// jointCalls cuts ops into takeall.lua calls, never inside a joint: runs at
// one Now and, on a Cluster, of one slot, of at most maxCallOps ops but
// for a joint that would pass it.
func (r *Redis) jointCalls(ops []limiter.Op) []takeChunk {
	var calls []takeChunk
	for i := 0; i < len(ops); {
		j := jointEnd(ops, i)
		if n := len(calls); n > 0 && ops[i].Now == ops[i-1].Now && j-calls[n-1].from <= maxCallOps &&
			(r.cluster == nil || Slot(ops[i].Key) == Slot(ops[i-1].Key)) {
			calls[n-1].to = j
		} else {
			calls = append(calls, takeChunk{from: i, to: j})
		}
		i = j
	}
	return calls
}

// takeJointCalls sends the jointCalls of ops in one pipeline, and those
// answered NOSCRIPT again with the script's source.
func (r *Redis) takeJointCalls(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	calls := r.jointCalls(ops)
	for _, bySHA := range []bool{true, false} {
		var dropped atomic.Bool
		pipe := r.client.Pipeline()
		cmds := make([]onceCmd, len(calls))
		for i := range calls {
			ch := &calls[i]
			ch.tag = nextTag()
			cmds[i] = onceCmd{Cmder: takeAllCmd(ctx, bySHA, ch.tag, ops[ch.from:ch.to]), live: liveOf(ctx), dropped: &dropped}
			_ = pipe.Process(ctx, cmds[i])
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		if dropped.Load() {
			return ErrNotSent
		}
		var missing []takeChunk
		for i, ch := range calls {
			v, err := cmds[i].Cmder.(interface{ Int64Slice() ([]int64, error) }).Int64Slice()
			switch {
			case err != nil && bySHA && IsNoScript(err):
				missing = append(missing, ch)
				continue
			case err == nil:
				err = decodeTagged(v, ch.tag, results[ch.from:ch.to])
			}
			if err != nil {
				return err
			}
		}
		if len(missing) == 0 {
			return nil
		}
		calls = missing
	}
	return nil
}
