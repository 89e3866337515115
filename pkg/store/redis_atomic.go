package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var _ limiter.AtomicStore = (*Redis)(nil)

// atomicSHA is the digest EVALSHA names lua.Atomic by.
var atomicSHA = func() string {
	sum := sha1.Sum([]byte(lua.Atomic))
	return hex.EncodeToString(sum[:])
}()

// atomicArgs is the number of ARGV entries per op of lua/atomic.lua.
const atomicArgs = 8

// TakeAll decides ops all or nothing in one script call (lua/atomic.lua),
// as described on limiter.AtomicStore. It sends EVALSHA, and EVAL when the
// server answers NOSCRIPT (the script did not run, so sending it again is
// safe; EVAL also loads it). Neither is ever retried by the client: a
// Cluster client re-sends a single command after a network error or
// timeout, whatever its MaxRetries, unless the command says NoRetry. The script is not loaded by Open or Load, so
// a server's first all-or-nothing call costs that extra round trip. In
// Redis Cluster all keys of a call must share a hash slot. An error wraps
// limiter.ErrUnavailable, or ErrInvalidOp for ops that were not sent.
func (r *Redis) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take all", checkAtomicOps(ops, results), len(ops)); !send {
		return err
	}
	keys := make([]string, len(ops))
	args := make([]any, 0, 1+atomicArgs*len(ops))
	args = append(args, ops[0].Now)
	for i := range ops {
		op := &ops[i]
		keys[i] = op.Key
		args = append(args, int64(op.Algorithm), op.Limit, op.Window, op.Cost,
			op.Burst, op.RateNum, op.RateDen, int64(op.Veto))
	}
	cmd := r.evalAtomic(ctx, true, keys, args)
	if err := cmd.Err(); err != nil && isNoScript(err) {
		cmd = r.evalAtomic(ctx, false, keys, args)
	}
	v, err := cmd.Int64Slice()
	if err == nil {
		err = decodeResults(v, results[:len(ops)])
	}
	if err != nil {
		return unavailable("take all", err)
	}
	return nil
}

// evalAtomic runs lua.Atomic by digest or by source, as a command that
// go-redis must not retry.
func (r *Redis) evalAtomic(ctx context.Context, bySHA bool, keys []string, args []any) *redis.Cmd {
	all := make([]any, 0, 3+len(keys)+len(args))
	if bySHA {
		all = append(all, "evalsha", atomicSHA)
	} else {
		all = append(all, "eval", lua.Atomic)
	}
	all = append(all, len(keys))
	for _, k := range keys {
		all = append(all, k)
	}
	all = append(all, args...)
	cmd := redis.NewCmd(ctx, all...)
	_ = r.client.Process(ctx, onceCmd{cmd}) // the error is cmd's
	return cmd
}

// onceCmd is a command that go-redis must not send twice.
type onceCmd struct{ redis.Cmder }

func (onceCmd) NoRetry() bool { return true }
