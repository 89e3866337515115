package store

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// onceCmd is a command go-redis must not send twice, nor at all once its
// callers have all gone: then Args, which go-redis asks as it writes the
// command, turns it into unsentArgs and sets dropped, so that the send
// fails with ErrNotSent (docs/design.md, "Merging calls").
type onceCmd struct {
	redis.Cmder
	live    func() bool  // nil: always live
	dropped *atomic.Bool // set when the command went out as the ECHO
}

// unsentArgs is what a command whose callers are gone is written as: an
// ECHO with one argument too many, which Redis refuses before running
// anything. Its reply, an error, is one a command of any reply type reads
// whole; a string (ECHO's own) fails a call that expects integers mid-reply,
// and go-redis then closes the connection the call waited for.
var unsentArgs = []any{"echo", "fastlimit: callers gone, script call not sent", "not run"}

func (onceCmd) NoRetry() bool { return true }

// Args returns the command's arguments, or unsentArgs once its callers are gone.
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

// withLive returns ctx carrying live: does a caller of the send still wait?
func withLive(ctx context.Context, live func() bool) context.Context {
	return context.WithValue(ctx, liveKey{}, live)
}

func liveOf(ctx context.Context) func() bool {
	live, _ := ctx.Value(liveKey{}).(func() bool)
	return live
}
