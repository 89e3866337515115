package store

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/resp"
)

// RedisMux is a limiter.AtomicStore on one Redis server (no Cluster, no
// Sentinel) that runs the same Lua scripts as Redis, through package
// resp rather than go-redis: requests share a few pipelined connections,
// and a Take costs one small buffer write and no per-op objects.
// Concurrent Takes leave in one write when they arrive together, so the
// pipelines grow with the load without a coalescing stage.
//
// Semantics are Redis's: a Take's ops go out as EVALSHA in one batch; ops
// answered NOSCRIPT did not run and are sent again with EVAL; any other
// failure fails the call and nothing is re-sent, because an op that may
// have run must not run twice. A Take waits no longer than its ctx allows.
type RedisMux struct {
	client  *resp.Client
	log     *zap.Logger
	scripts [3]script
}

var _ limiter.AtomicStore = (*RedisMux)(nil)

// NewRedisMux returns a RedisMux that owns client. It does no I/O.
func NewRedisMux(client *resp.Client, logger *zap.Logger) *RedisMux {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &RedisMux{client: client, log: logger, scripts: algorithmScripts()}
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
	for _, s := range m.scripts {
		b.Command(3)
		b.String("SCRIPT")
		b.String("LOAD")
		b.String(s.src)
	}
	if err := m.client.Do(ctx, b); err != nil {
		return unavailable("load scripts", err)
	}
	for i, s := range m.scripts {
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

// Ping sends PING.
func (m *RedisMux) Ping(ctx context.Context) error {
	b := m.client.Batch()
	defer m.client.Release(b)
	b.Command(1)
	b.String("PING")
	if err := m.client.Do(ctx, b); err != nil {
		return unavailable("ping", err)
	}
	if err := b.Reply(0).Err(); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

// Close closes the connections. It is idempotent.
func (m *RedisMux) Close() error { return m.client.Close() }

// Take decides ops in one round trip, two if the server lost the scripts.
// An error wraps limiter.ErrUnavailable, or ErrInvalidOp for ops that were
// not sent.
func (m *RedisMux) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take", checkOps(ops, results), len(ops)); !send {
		return err
	}
	b := m.client.Batch()
	for i := range ops {
		m.eval(b, &ops[i], true)
	}
	err := m.client.Do(ctx, b)
	if err != nil {
		m.client.Release(b)
		return unavailable("take", err)
	}
	var missing []int
	for i := range ops {
		r := b.Reply(i)
		if r.HasErrorPrefix("NOSCRIPT") {
			missing = append(missing, i)
			continue
		}
		if err := scriptResults(r, results[i:i+1]); err != nil {
			m.client.Release(b)
			return unavailable("take "+m.scripts[ops[i].Algorithm].name, err)
		}
	}
	m.client.Release(b)
	if len(missing) == 0 {
		return nil
	}

	// The ops answered NOSCRIPT did not run, so they are safe to send
	// again; EVAL cannot answer NOSCRIPT and loads the script as it runs.
	m.log.Debug("scripts missing on the server, sending ops with EVAL", zap.Int(logKeyOps, len(missing)))
	b = m.client.Batch()
	defer m.client.Release(b)
	for _, i := range missing {
		m.eval(b, &ops[i], false)
	}
	if err := m.client.Do(ctx, b); err != nil {
		return unavailable("take", err)
	}
	for j, i := range missing {
		if err := scriptResults(b.Reply(j), results[i:i+1]); err != nil {
			return unavailable("take "+m.scripts[ops[i].Algorithm].name, err)
		}
	}
	return nil
}

// eval appends op's script call to b, by digest or by source.
func (m *RedisMux) eval(b *resp.Batch, op *limiter.Op, bySHA bool) {
	s := &m.scripts[op.Algorithm]
	if op.Algorithm == descriptors.TokenBucket {
		b.Command(10)
	} else {
		b.Command(8)
	}
	if bySHA {
		b.String("EVALSHA")
		b.String(s.sha)
	} else {
		b.String("EVAL")
		b.String(s.src)
	}
	b.Int(1)
	b.String(op.Key)
	if op.Algorithm == descriptors.TokenBucket {
		b.Int(op.Burst)
		b.Int(op.RateNum)
		b.Int(op.RateDen)
		b.Int(op.Window)
	} else {
		b.Int(op.Limit)
		b.Int(op.Window)
	}
	b.Int(op.Cost)
	b.Int(op.Now)
}

// scriptResults reads a script's reply of 4 integers per result (see
// decodeResults).
func scriptResults(r *resp.Reply, results []limiter.Result) error {
	if err := r.Err(); err != nil {
		return err
	}
	if r.Kind != resp.KindArray || r.Mixed {
		return fmt.Errorf("script replied %s, want 4 integers per op", describe(r))
	}
	return decodeResults(r.Ints, results)
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
	}
	return fmt.Sprintf("a reply of type %q", r.Kind)
}

// TakeAll decides ops all or nothing in one script call (lua/atomic.lua),
// as Redis.TakeAll does.
func (m *RedisMux) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take all", checkAtomicOps(ops, results), len(ops)); !send {
		return err
	}
	r, b, err := m.evalAtomic(ctx, ops, true)
	if err == nil && r.HasErrorPrefix("NOSCRIPT") {
		m.client.Release(b)
		r, b, err = m.evalAtomic(ctx, ops, false)
	}
	if err != nil {
		return unavailable("take all", err)
	}
	defer m.client.Release(b)
	if err := scriptResults(r, results[:len(ops)]); err != nil {
		return unavailable("take all", err)
	}
	return nil
}

// evalAtomic runs lua.Atomic by digest or by source. On success the caller
// releases the batch.
func (m *RedisMux) evalAtomic(ctx context.Context, ops []limiter.Op, bySHA bool) (*resp.Reply, *resp.Batch, error) {
	b := m.client.Batch()
	b.Command(4 + len(ops) + atomicArgs*len(ops))
	if bySHA {
		b.String("EVALSHA")
		b.String(atomicSHA)
	} else {
		b.String("EVAL")
		b.String(lua.Atomic)
	}
	b.Int(int64(len(ops)))
	for i := range ops {
		b.String(ops[i].Key)
	}
	b.Int(ops[0].Now)
	for i := range ops {
		op := &ops[i]
		b.Int(int64(op.Algorithm))
		b.Int(op.Limit)
		b.Int(op.Window)
		b.Int(op.Cost)
		b.Int(op.Burst)
		b.Int(op.RateNum)
		b.Int(op.RateDen)
		b.Int(int64(op.Veto))
	}
	if err := m.client.Do(ctx, b); err != nil {
		m.client.Release(b)
		return nil, nil, err
	}
	return b.Reply(0), b, nil
}
