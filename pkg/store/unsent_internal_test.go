package store

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestUnsentKeepsConnection: a script call whose callers are gone when
// go-redis writes it goes out as unsentArgs. Whatever reply the call
// expected (take.lua's integers, fixed.lua's string, TakeAll's any), its
// reply is read whole, so go-redis keeps the connection, whose dial and
// handshake the call waited for, for the calls that follow; and Redis runs
// nothing of it.
func TestUnsentKeepsConnection(t *testing.T) {
	addr := redistest.Addr(t)
	ctx := context.Background()
	base := fmt.Sprintf("unsent:%d:", time.Now().UnixNano())
	op := func(i int) limiter.Op {
		return limiter.Op{Key: fmt.Sprintf("%s{u}:%d:", base, i), Algorithm: descriptors.FixedWindow, Limit: 5000,
			Window: 60_000, Cost: 1000, Now: 4_000_000_000_000}
	}
	one, two := []limiter.Op{op(0)}, []limiter.Op{op(1), op(2)}
	cmds := []struct {
		name string
		cmd  func() redis.Cmder
	}{
		{"take.lua, two ops", func() redis.Cmder { return takeCmd(ctx, takeScript, true, nextTag(), two).cmd }},
		{"take.lua by source", func() redis.Cmder { return takeCmd(ctx, takeScript, false, nextTag(), two).cmd }},
		{"fixed.lua, one op", func() redis.Cmder { return takeCmd(ctx, takeScript, true, nextTag(), one).cmd }},
		{"TakeAll", func() redis.Cmder { return takeAllCmd(ctx, true, nextTag(), two) }},
	}
	// The pipeline pool of NewClient's clients, and none (ConnOptions.MaxConns).
	for _, pool := range []int{0, -1} {
		var dials atomic.Int64
		client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, PipelinePoolSize: pool, MaxRetries: -1,
			ContextTimeoutEnabled: true, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}})
		t.Cleanup(func() { _ = client.Close() })
		ping := func(t *testing.T) {
			t.Helper()
			if _, err := client.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range cmds {
			t.Run(fmt.Sprintf("%s/pipeline pool %d", tc.name, pool), func(t *testing.T) {
				ping(t)
				var dropped atomic.Bool
				gone := func() bool { return false }
				// Two calls in one pipeline: the second reply is read too.
				pipe := client.Pipeline()
				_ = pipe.Process(ctx, onceCmd{Cmder: tc.cmd(), live: gone, dropped: &dropped})
				_ = pipe.Process(ctx, onceCmd{Cmder: tc.cmd(), live: gone, dropped: &dropped})
				before := dials.Load()
				cmds, _ := pipe.Exec(ctx)
				if !dropped.Load() {
					t.Fatal("the calls of callers gone were written as themselves")
				}
				for i, c := range cmds {
					if isConnError(c.Err()) {
						t.Errorf("call %d: %v, want its reply read whole", i, c.Err())
					}
				}
				ping(t)
				if n := dials.Load() - before; n != 0 {
					t.Errorf("the next pipeline dialed %d connections: the one the unsent calls went on was closed", n)
				}
			})
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = admin.Close() }()
	keys, err := admin.Keys(ctx, base+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("Redis holds %v (%v): an unsent call ran", keys, err)
	}
}
