package store

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Take decides ops in take.lua calls shared with other Takes. An error
// wraps limiter.ErrUnavailable (and ErrNotSent when nothing was sent), or
// is ErrInvalidOp's, when nothing was sent either.
func (r *Redis) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take", checkOps(ops, results), len(ops)); !send {
		return err
	}
	if hasJoint(ops) {
		return r.takeJoints(ctx, ops, results)
	}
	if r.cluster == nil {
		return r.single.take(ctx, ops, results)
	}
	return r.takeCluster(ctx, ops, results)
}

// BatchStats returns Take's pipelines and their ops so far, over every server.
func (r *Redis) BatchStats() BatchStats {
	if r.single != nil {
		return r.single.Stats()
	}
	var all BatchStats
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.nodes {
		s := b.Stats()
		all.Sends += s.Sends
		all.Ops += s.Ops
	}
	return all
}

func (r *Redis) newBatcher(send sendFunc) *batcher {
	return newBatcher(send, batchOptions{Slots: r.opts.Batches, MaxOps: 4 * maxCallOps, Timeout: r.opts.SendTimeout,
		Gather: r.opts.PipelineWindow, GatherOps: cmp.Or(r.opts.PipelineLimit, maxCallOps), Sum: r.gathering})
}

// takeCluster sends each op to its master's batcher and waits for them all.
func (r *Redis) takeCluster(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	first, err := r.cluster.MasterForKey(ctx, ops[0].Key)
	if err != nil {
		return unavailable("take: find node", err)
	}
	same := true
	var buf [8]*redis.Client // a request's descriptors are few: no allocation
	nodes := append(buf[:0], first)
	for i := 1; i < len(ops); i++ {
		n, err := r.cluster.MasterForKey(ctx, ops[i].Key)
		if err != nil {
			return unavailable("take: find node", err)
		}
		nodes = append(nodes, n)
		same = same && n == first
	}
	if same {
		return r.nodeBatcher(first).take(ctx, ops, results)
	}
	type share struct {
		idx     []int
		ops     []limiter.Op
		results []limiter.Result
		err     error
	}
	shares := map[*redis.Client]*share{}
	var order []*redis.Client
	for i, n := range nodes {
		sh := shares[n]
		if sh == nil {
			sh = &share{}
			shares[n] = sh
			order = append(order, n)
		}
		sh.idx = append(sh.idx, i)
		sh.ops = append(sh.ops, ops[i])
	}
	var wg sync.WaitGroup
	for _, n := range order {
		sh := shares[n]
		sh.results = make([]limiter.Result, len(sh.ops))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh.err = r.nodeBatcher(n).take(ctx, sh.ops, sh.results)
		}()
	}
	wg.Wait()
	for _, n := range order {
		if err := shares[n].err; err != nil {
			return err
		}
	}
	for _, n := range order {
		sh := shares[n]
		for j, i := range sh.idx {
			results[i] = sh.results[j]
		}
	}
	return nil
}

func (r *Redis) nodeBatcher(node *redis.Client) *batcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.nodes[node]
	if b == nil {
		b = r.newBatcher(func(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
			return r.send(ctx, node, ops, results)
		})
		r.nodes[node] = b
	}
	return b
}

// send runs ops on one server as one pipeline of take.lua calls, each key's
// ops together (keyGroups); see sendCalls for what is sent again.
func (r *Redis) send(ctx context.Context, c redis.Cmdable, ops []limiter.Op, results []limiter.Result) error {
	g := groupings.Get().(*keyGroups)
	defer groupings.Put(g)
	grouped, res := g.put(ops, results)
	var err error
	switch {
	case r.cluster != nil && r.perSlot.Load():
		err = r.sendBySlot(ctx, c, grouped, res)
	case r.cluster != nil:
		var chunks [maxSendChunks]takeChunk
		err = r.sendCalls(ctx, c, takeCrossScript, grouped, res, splitChunks(grouped, chunks[:0]))
	default:
		var chunks [maxSendChunks]takeChunk
		err = r.sendCalls(ctx, c, takeScript, grouped, res, splitChunks(grouped, chunks[:0]))
	}
	if err != nil {
		g.release()
		return err
	}
	g.scatter(results)
	return nil
}

// sendBySlot sends ops in calls of one slot each, in one pipeline.
func (r *Redis) sendBySlot(ctx context.Context, c redis.Cmdable, ops []limiter.Op, results []limiter.Result) error {
	sorted, perm, calls := slotCalls(ops)
	res := make([]limiter.Result, len(ops))
	if err := r.sendCalls(ctx, c, takeScript, sorted, res, calls); err != nil {
		return err
	}
	for i, j := range perm {
		results[j] = res[i]
	}
	return nil
}

// sendCalls sends calls of s as one pipeline, then those answered NOSCRIPT
// again with EVAL, and those a Cluster node did not run through the
// Cluster client, slot by slot.
func (r *Redis) sendCalls(ctx context.Context, c redis.Cmdable, s *script, ops []limiter.Op, results []limiter.Result, calls []takeChunk) error {
	missing, moved, err := r.sendChunks(ctx, c, s, true, ops, results, calls)
	if err == nil && len(missing) > 0 { // they did not run
		r.log.Debug("scripts missing on the server, sending ops with EVAL", zap.Int(logKeyOps, len(missing)))
		var moved2 []takeChunk
		_, moved2, err = r.sendChunks(ctx, c, s, false, ops, results, missing)
		moved = append(moved, moved2...)
	}
	if err == nil && len(moved) > 0 {
		n := 0
		for _, ch := range moved {
			n += ch.to - ch.from
		}
		r.log.Debug("ops not run on the node they were sent to (a slot moved); sending them again where the cluster says",
			zap.Int(logKeyOps, n))
		err = r.resend(ctx, ops, results, moved)
	}
	return err
}

// sendChunks sends calls as one pipeline, by digest or source, and decodes
// the replies. It returns the calls answered NOSCRIPT, and those (or ops) a
// Cluster node did not run.
func (r *Redis) sendChunks(ctx context.Context, c redis.Cmdable, s *script, bySHA bool,
	ops []limiter.Op, results []limiter.Result, calls []takeChunk) (missing, moved []takeChunk, err error) {
	cmds := make([]takeCall, len(calls))
	var notHere []int
	var dropped atomic.Bool
	live := liveOf(ctx)
	pipe := c.Pipeline()
	for i := range calls {
		ch := &calls[i]
		ch.tag = nextTag()
		cmds[i] = takeCmd(ctx, s, bySHA, ch.tag, ops[ch.from:ch.to])
		_ = pipe.Process(ctx, onceCmd{Cmder: cmds[i].cmd, live: live, dropped: &dropped})
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	if dropped.Load() {
		// Its callers were gone when go-redis wrote it.
		return nil, nil, unavailable("take", ErrNotSent)
	}
	for i, ch := range calls {
		err := cmds[i].cmd.Err()
		switch {
		case err != nil && IsNoScript(err):
			missing = append(missing, ch)
			continue
		case err != nil && r.cluster != nil && isRedirect(err):
			moved = append(moved, ch)
			continue
		case err != nil && r.cluster != nil && cmds[i].script == takeCrossScript && isScriptFlagError(err):
			r.log.Warn("redis cluster refuses cross-slot script calls; sending one slot a call", zap.Error(err))
			r.perSlot.Store(true)
			moved = append(moved, ch)
			continue
		case err != nil:
			if isConnError(err) && r.cluster != nil {
				r.cluster.ReloadState(ctx)
			}
			return nil, nil, unavailable("take", err)
		}
		notHere = notHere[:0]
		if err := cmds[i].decode(ch.tag, ops[ch.from:ch.to], results[ch.from:ch.to], &notHere); err != nil {
			return nil, nil, unavailable("take", err)
		}
		for _, k := range notHere {
			moved = append(moved, takeChunk{from: ch.from + k, to: ch.from + k + 1})
		}
	}
	return missing, moved, nil
}

// takeCall is one script call of a send: its command, and the script
// that answers it.
type takeCall struct {
	cmd    redis.Cmder
	script *script
}

// takeCmd builds the script call of ops, to s (take.lua or its cross-slot
// variant) or to fixed.lua when it decides them (takeEncoder.plan).
func takeCmd(ctx context.Context, s *script, bySHA bool, tag int64, ops []limiter.Op) takeCall {
	enc := encoders.Get().(*takeEncoder)
	defer encoders.Put(enc)
	args := make(anyArgs, 0, 2+enc.plan(ops, s))
	s = enc.script
	if bySHA {
		args = append(args, "evalsha", s.args[0])
	} else {
		args = append(args, "eval", s.args[1])
	}
	enc.write(&args, tag, ops)
	if s == fixedScript && len(ops) == 1 {
		return takeCall{redis.NewStringCmd(ctx, args...), s}
	}
	return takeCall{redis.NewIntSliceCmd(ctx, args...), s}
}

// decode fills results from the call's reply (decodeReply).
func (c takeCall) decode(tag int64, ops []limiter.Op, results []limiter.Result, moved *[]int) error {
	var v []int64
	var err error
	switch cmd := c.cmd.(type) {
	case *redis.StringCmd:
		var one [4]int64
		var s string
		if s, err = cmd.Result(); err == nil {
			v, err = parseFixedOne(s, &one)
		}
	case *redis.IntSliceCmd:
		v, err = cmd.Result()
	}
	if err != nil {
		return err
	}
	return decodeReply(c.script, v, tag, ops, results, moved)
}

// resend sends calls a Cluster node did not run through the Cluster
// client, which follows redirects, one slot a call.
func (r *Redis) resend(ctx context.Context, ops []limiter.Op, results []limiter.Result, calls []takeChunk) error {
	r.cluster.ReloadState(ctx)
	for _, ch := range calls {
		sorted, perm, subs := slotCalls(ops[ch.from:ch.to])
		res := make([]limiter.Result, len(sorted))
		for _, sub := range subs {
			part := sorted[sub.from:sub.to]
			tag := nextTag()
			var dropped atomic.Bool
			call := takeCmd(ctx, takeScript, true, tag, part)
			_ = r.client.Process(ctx, onceCmd{Cmder: call.cmd, live: liveOf(ctx), dropped: &dropped})
			if err := call.cmd.Err(); err != nil && IsNoScript(err) {
				tag = nextTag()
				call = takeCmd(ctx, takeScript, false, tag, part)
				_ = r.client.Process(ctx, onceCmd{Cmder: call.cmd, live: liveOf(ctx), dropped: &dropped})
			}
			if dropped.Load() {
				return unavailable("take", ErrNotSent)
			}
			err := call.cmd.Err()
			if err == nil {
				err = call.decode(tag, part, res[sub.from:sub.to], nil)
			}
			if err != nil {
				return unavailable("take", err)
			}
		}
		for i, j := range perm {
			results[ch.from+j] = res[i]
		}
	}
	return nil
}

// isRedirect reports a Cluster answer that means the call did not run there.
func isRedirect(err error) bool {
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "CROSSSLOT"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// isScriptFlagError reports a Redis before 7 refusing the cross-slot shebang.
func isScriptFlagError(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "compiling script") || strings.Contains(msg, "shebang") ||
		strings.Contains(msg, "flag")
}
