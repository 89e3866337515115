package store

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.AtomicStore = (*Redis)(nil)

// TakeAll decides ops all or nothing in one script call (lua/atomic.lua),
// as described on limiter.AtomicStore. It sends EVALSHA, and EVAL when the
// server answers NOSCRIPT (the script did not run, so sending it again is
// safe; EVAL also loads it). Neither is ever retried by the client: a
// Cluster client re-sends a single command after a network error or
// timeout, whatever its MaxRetries, unless the command says NoRetry. The
// call carries a tag that the script echoes, as Take's calls do. It is
// never merged with other calls. In Redis Cluster all keys of a call must
// share a hash slot. An error wraps limiter.ErrUnavailable, or
// ErrInvalidOp for ops that were not sent.
func (r *Redis) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take all", checkAtomicOps(ops, results), len(ops)); !send {
		return err
	}
	// As Take's sends, the call goes on when its caller gives up, so that a
	// connection it is dialling gets ready for the next.
	res := make([]limiter.Result, len(ops))
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), r.opts.SendTimeout)
		defer cancel()
		// Written only while its caller waits (see onceCmd).
		done <- r.takeAll(withLive(sctx, func() bool { return ctx.Err() == nil }), ops, res)
	}()
	select {
	case err := <-done:
		if err != nil {
			return unavailable("take all", err)
		}
		copy(results, res)
		return nil
	case <-ctx.Done():
		return unavailable("take all", ctx.Err())
	}
}

func (r *Redis) takeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	tag := nextTag()
	cmd := r.evalAtomic(ctx, true, tag, ops)
	if err := cmd.Err(); err != nil && isNoScript(err) {
		tag = nextTag()
		cmd = r.evalAtomic(ctx, false, tag, ops)
	}
	v, err := cmd.Int64Slice()
	if err == nil {
		err = decodeTagged(v, tag, results)
	}
	return err
}

// evalAtomic runs lua.Atomic by digest or by source, as a command that
// go-redis must not retry, nor write once the caller has gone.

func (r *Redis) evalAtomic(ctx context.Context, bySHA bool, tag int64, ops []limiter.Op) *redis.Cmd {
	args := make(anyArgs, 0, 6+len(ops)+atomicArgs*len(ops))
	if bySHA {
		args = append(args, "evalsha", atomicScript.sha)
	} else {
		args = append(args, "eval", atomicScript.src)
	}
	writeAtomic(&args, tag, ops)
	cmd := redis.NewCmd(ctx, args...)
	var dropped atomic.Bool
	_ = r.client.Process(ctx, onceCmd{Cmder: cmd, live: liveOf(ctx), dropped: &dropped})
	if dropped.Load() {
		cmd.SetErr(ErrNotSent)
	}
	return cmd
}
