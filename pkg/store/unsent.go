package store

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// onceCmd is a command that go-redis must not send twice, and must not
// send at all once the callers it decides for have all given up.
//
// A send can wait after its callers are gone: in the batcher's queue (the
// batcher drops such calls), or inside go-redis for a connection (a dial
// and its handshake, a pool whose connections are all in use). go-redis
// asks a command for its arguments as it writes it onto the connection,
// so Args is where the second wait ends: when live reports the callers
// gone, the command is written as a harmless ECHO instead, its reply is
// read as usual (the connection stays in step), and dropped marks it so
// that its send fails with ErrNotSent rather than a reply mismatch.
type onceCmd struct {
	redis.Cmder
	live    func() bool  // nil: always live
	dropped *atomic.Bool // set when the command went out as the ECHO
}

// unsentArgs is what a command whose callers are gone is written as.
var unsentArgs = []any{"echo", "fastlimit: callers gone, script call not sent"}

func (onceCmd) NoRetry() bool { return true }

// Args returns the command's arguments, or unsentArgs when its callers are
// gone.
func (c onceCmd) Args() []any {
	if c.live != nil && !c.live() {
		if c.dropped != nil {
			c.dropped.Store(true)
		}
		return unsentArgs
	}
	return c.Cmder.Args()
}

// liveKey is the context key of a send's liveness check (withLive).
type liveKey struct{}

// withLive returns ctx carrying live, which reports whether any caller a
// send decides for still waits for it.
func withLive(ctx context.Context, live func() bool) context.Context {
	return context.WithValue(ctx, liveKey{}, live)
}

// liveOf returns the liveness check ctx carries, or nil.
func liveOf(ctx context.Context) func() bool {
	live, _ := ctx.Value(liveKey{}).(func() bool)
	return live
}
