package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/resp"
)

// RedisMux is a limiter.AtomicStore on one Redis server (no Cluster, no
// Sentinel) that runs the same Lua scripts as Redis, through package
// resp rather than go-redis: requests share a few pipelined connections,
// and a Take costs one small buffer write and no per-op objects.
//
// Concurrent Takes are merged: while as many script calls are in flight as
// there are connections, the ops of the Takes that arrive meanwhile leave
// together in the next call (lua/take.lua decides any number of ops), so
// Redis pays one script call for many decisions and the calls grow with
// the load. A Take that finds a connection free goes out at once.
//
// Semantics are Redis's: every call carries a tag that the script echoes,
// and a reply without its call's tag fails the call and closes the
// connection (its replies have drifted from its calls). A call answered
// NOSCRIPT did not run and is sent again with EVAL; any other failure
// fails the call and nothing is re-sent, because an op that may have run
// must not run twice. A Take that gives up before its call is written is
// never sent (ErrNotSent). A Take waits no longer than its ctx allows.
type RedisMux struct {
	client *resp.Client
	log    *zap.Logger
	batch  *batcher
}

var _ limiter.AtomicStore = (*RedisMux)(nil)

// NewRedisMux returns a RedisMux that owns client, with as many script
// calls in flight at once as the client has connections. It does no I/O.
func NewRedisMux(client *resp.Client, logger *zap.Logger) *RedisMux {
	if logger == nil {
		logger = zap.NewNop()
	}
	m := &RedisMux{client: client, log: logger}
	m.batch = newBatcher(m.send, client.Conns(), 4*maxBatchOps, time.Second)
	return m
}

// Open connects, checks that Redis answers and loads the scripts.
// Calling it is optional: the first Take connects and loads them too.
func (m *RedisMux) Open(ctx context.Context) error {
	if err := m.client.Connect(ctx); err != nil {
		return unavailable("connect", err)
	}
	if err := m.Ping(ctx); err != nil {
		return err
	}
	b := m.client.Batch()
	defer m.client.Release(b)
	scripts := []script{takeScript, atomicScript}
	for _, s := range scripts {
		b.Command(3)
		b.String("SCRIPT")
		b.String("LOAD")
		b.String(s.src)
	}
	if err := m.client.Do(ctx, b); err != nil {
		return unavailable("load scripts", err)
	}
	for i, s := range scripts {
		r := b.Reply(i)
		if err := r.Err(); err != nil {
			return unavailable("load script "+s.name, err)
		}
		if string(r.Str) != s.sha {
			return fmt.Errorf("load script %s: %w: server digest %s, want %s", s.name, limiter.ErrUnavailable, r.Str, s.sha)
		}
	}
	return nil
}

// Ping sends PING. A reply other than PONG closes the connection that
// carried it.
func (m *RedisMux) Ping(ctx context.Context) error {
	b := m.client.Batch()
	defer m.client.Release(b)
	b.Command(1)
	b.String("PING")
	if err := m.client.Do(ctx, b); err != nil {
		return unavailable("ping", err)
	}
	r := b.Reply(0)
	if err := r.Err(); err != nil {
		return unavailable("ping", err)
	}
	if r.Kind != resp.KindStatus || string(r.Str) != "PONG" {
		err := fmt.Errorf("%w: PING answered %s", ErrReplyMismatch, describe(r))
		m.client.Discard(b, err)
		return unavailable("ping", err)
	}
	return nil
}

// Close fails the Takes that wait and closes the connections. It is
// idempotent.
func (m *RedisMux) Close() error {
	m.batch.close()
	return m.client.Close()
}

// BatchStats returns how many script calls' pipelines Take made, and how
// many ops they carried.
func (m *RedisMux) BatchStats() BatchStats { return m.batch.Stats() }

// Take decides ops, in a script call of their own or shared with other
// Takes: one round trip, two if the server lost the scripts. An error wraps
// limiter.ErrUnavailable (and ErrNotSent if nothing was sent), or
// ErrInvalidOp for ops that were not sent.
func (m *RedisMux) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take", checkOps(ops, results), len(ops)); !send {
		return err
	}
	return m.batch.take(ctx, ops, results)
}

// send runs ops as take.lua calls of at most maxBatchOps ops each, in one
// batch, and the calls answered NOSCRIPT again with EVAL.
func (m *RedisMux) send(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	var chunks [maxSendChunks]takeChunk
	calls := splitChunks(ops, chunks[:0])
	missing, err := m.sendChunks(ctx, ops, results, calls, true)
	if err != nil || len(missing) == 0 {
		return err
	}
	// The calls answered NOSCRIPT did not run, so they are safe to send
	// again; EVAL cannot answer NOSCRIPT and loads the script as it runs.
	m.log.Debug("scripts missing on the server, sending ops with EVAL", zap.Int(logKeyOps, len(missing)))
	_, err = m.sendChunks(ctx, ops, results, missing, false)
	return err
}

// sendChunks sends one batch of take.lua calls, by digest or by source, and
// decodes their replies into results. It returns the calls answered
// NOSCRIPT.
func (m *RedisMux) sendChunks(ctx context.Context, ops []limiter.Op, results []limiter.Result,
	calls []takeChunk, bySHA bool) (missing []takeChunk, err error) {
	b := m.client.Batch()
	enc := encoders.Get().(*takeEncoder)
	for i := range calls {
		c := &calls[i]
		c.tag = nextTag()
		part := ops[c.from:c.to]
		b.Command(2 + enc.plan(part))
		if bySHA {
			b.String("EVALSHA")
			b.String(takeScript.sha)
		} else {
			b.String("EVAL")
			b.String(takeScript.src)
		}
		enc.write(b, c.tag, part)
	}
	encoders.Put(enc)
	if err := m.client.Do(ctx, b); err != nil {
		m.client.Release(b)
		return nil, unavailable("take", err)
	}
	defer m.client.Release(b)
	for i, c := range calls {
		r := b.Reply(i)
		if bySHA && r.HasErrorPrefix("NOSCRIPT") {
			missing = append(missing, c)
			continue
		}
		if err := m.scriptReply(b, r, func(v []int64) error {
			return decodeTake(v, c.tag, ops[c.from:c.to], results[c.from:c.to])
		}); err != nil {
			return nil, unavailable("take", err)
		}
	}
	return missing, nil
}

// scriptReply decodes a tagged script reply with decode. A reply that is
// not what the call expects closes the connection that carried b.
func (m *RedisMux) scriptReply(b *resp.Batch, r *resp.Reply, decode func([]int64) error) error {
	if err := r.Err(); err != nil {
		return err
	}
	var err error
	if r.Kind != resp.KindArray || r.Mixed {
		err = fmt.Errorf("%w: script replied %s, want a tag and integers", ErrReplyMismatch, describe(r))
	} else {
		err = decode(r.Ints)
	}
	if errors.Is(err, ErrReplyMismatch) {
		m.client.Discard(b, err)
	}
	return err
}

// describe names a reply's shape for errors.
func describe(r *resp.Reply) string {
	switch {
	case r.Kind == resp.KindArray && r.Nil:
		return "a nil array"
	case r.Kind == resp.KindArray:
		return fmt.Sprintf("an array of %d integers (mixed: %t)", len(r.Ints), r.Mixed)
	case r.Kind == resp.KindInt:
		return fmt.Sprintf("the integer %d", r.Int)
	case r.Kind == resp.KindStatus || r.Kind == resp.KindBulk:
		return fmt.Sprintf("%q", r.Str)
	}
	return fmt.Sprintf("a reply of type %q", r.Kind)
}

// TakeAll decides ops all or nothing in one script call (lua/atomic.lua),
// as Redis.TakeAll does. It is never merged with other calls.
func (m *RedisMux) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take all", checkAtomicOps(ops, results), len(ops)); !send {
		return err
	}
	tag := nextTag()
	r, b, err := m.evalAtomic(ctx, tag, ops, true)
	if err == nil && r.HasErrorPrefix("NOSCRIPT") {
		m.client.Release(b)
		tag = nextTag()
		r, b, err = m.evalAtomic(ctx, tag, ops, false)
	}
	if err != nil {
		return unavailable("take all", err)
	}
	defer m.client.Release(b)
	if err := m.scriptReply(b, r, func(v []int64) error { return decodeTagged(v, tag, results[:len(ops)]) }); err != nil {
		return unavailable("take all", err)
	}
	return nil
}

// evalAtomic runs lua.Atomic by digest or by source. On success the caller
// releases the batch.
func (m *RedisMux) evalAtomic(ctx context.Context, tag int64, ops []limiter.Op, bySHA bool) (*resp.Reply, *resp.Batch, error) {
	b := m.client.Batch()
	b.Command(5 + len(ops) + atomicArgs*len(ops))
	if bySHA {
		b.String("EVALSHA")
		b.String(atomicScript.sha)
	} else {
		b.String("EVAL")
		b.String(atomicScript.src)
	}
	writeAtomic(b, tag, ops)
	if err := m.client.Do(ctx, b); err != nil {
		m.client.Release(b)
		return nil, nil, err
	}
	return b.Reply(0), b, nil
}
