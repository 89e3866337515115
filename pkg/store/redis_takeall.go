package store

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.AllOrNothingStore = (*Redis)(nil)

// TakeAll decides ops all or nothing in one takeall.lua call of its own, as
// limiter.AllOrNothingStore says; on a Cluster all keys must share a slot. An
// error wraps limiter.ErrUnavailable, or is ErrInvalidOp's (nothing sent).
func (r *Redis) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take all", checkTakeAllOps(ops, results), len(ops)); !send {
		return err
	}
	return r.detached(ctx, "take all", ops, results, r.takeAll)
}

// detached runs send as Take's sends run: on a context of its own
// (SendTimeout), outliving its caller, but written only while the caller
// waits, into results of its own, copied to results once it succeeds.
func (r *Redis) detached(ctx context.Context, what string, ops []limiter.Op, results []limiter.Result,
	send func(context.Context, []limiter.Op, []limiter.Result) error) error {
	res := make([]limiter.Result, len(ops))
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), r.opts.SendTimeout)
		defer cancel()
		done <- send(withLive(sctx, func() bool { return ctx.Err() == nil }), ops, res)
	}()
	select {
	case err := <-done:
		if err != nil {
			return unavailable(what, err)
		}
		copy(results, res)
		return nil
	case <-ctx.Done():
		return unavailable(what, ctx.Err())
	}
}

func (r *Redis) takeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	tag := nextTag()
	cmd := r.evalTakeAll(ctx, true, tag, ops)
	if err := cmd.Err(); err != nil && IsNoScript(err) {
		tag = nextTag()
		cmd = r.evalTakeAll(ctx, false, tag, ops)
	}
	v, err := cmd.Int64Slice()
	if err == nil {
		err = decodeTagged(v, tag, results)
	}
	return err
}

// evalTakeAll runs lua.TakeAll by digest or source as an onceCmd.
func (r *Redis) evalTakeAll(ctx context.Context, bySHA bool, tag int64, ops []limiter.Op) *redis.Cmd {
	cmd := takeAllCmd(ctx, bySHA, tag, ops)
	var dropped atomic.Bool
	_ = r.client.Process(ctx, onceCmd{Cmder: cmd, live: liveOf(ctx), dropped: &dropped})
	if dropped.Load() {
		cmd.SetErr(ErrNotSent)
	}
	return cmd
}

// takeAllCmd is the lua.TakeAll call of ops, by digest or source.
func takeAllCmd(ctx context.Context, bySHA bool, tag int64, ops []limiter.Op) *redis.Cmd {
	args := make(anyArgs, 0, 2+takeAllArgCount(ops))
	if bySHA {
		args = append(args, "evalsha", takeAllScript.sha)
	} else {
		args = append(args, "eval", takeAllScript.src)
	}
	writeTakeAll(&args, tag, ops)
	return redis.NewCmd(ctx, args...)
}
