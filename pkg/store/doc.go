// Package store implements limiter.Store and limiter.AtomicStore twice:
// Redis runs the algorithms as Lua scripts (package lua) on a Redis server,
// Cluster or Sentinel-managed master through go-redis, so that every replica
// shares one state and one clock; Memory runs the same integer arithmetic in
// process. Both decide alike for alike ops and times, and every state they
// write expires once it can no longer change a decision.
//
// It also builds the go-redis client a Redis runs on: NewClient from
// ClientOptions (a deployment type, envoyproxy/ratelimit's REDIS_URL
// formats, credentials, TLS, pool and timeouts), or NewRedisFromURL for one
// server. Its clients never send a script call twice.
//
// Construct NewRedis(client, logger, RedisOptions{}) or
// NewMemory(MemoryOptions{}); Open loads Redis' scripts (optional) or starts
// Memory's janitor, and Close releases either. Both are safe for concurrent
// use. How they work: docs/design.md.
package store

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrInvalidOp marks an op outside the range the algorithms compute exactly,
// or too few results: a caller's bug, not a store failure, so it does not
// wrap limiter.ErrUnavailable. Nothing of such a call is decided.
var ErrInvalidOp = errors.New("invalid op")

// Bounds that keep every intermediate value below descriptors.MaxExact
// (docs/design.md, "Exact arithmetic").
const (
	maxCost      = 1 << 52    // costs and fixed-window counters saturate here
	maxAmount    = 1 << 50    // Limit and Burst, milli-requests
	maxWindow    = 1 << 45    // Window, ms (about 1,100 years)
	maxNow       = 1 << 50    // Now, ms after the epoch
	slidingSteps = 94_000_000 // steps of a sliding window: steps² < 2^53
)

// checkOps reports the first op that the algorithms cannot decide exactly,
// or that is joined (limiter.Op.Joined) to no op at its time.
func checkOps(ops []limiter.Op, results []limiter.Result) error {
	if len(results) < len(ops) {
		return fmt.Errorf("%w: %d results for %d ops", ErrInvalidOp, len(results), len(ops))
	}
	for i := range ops {
		if err := checkOp(&ops[i]); err != nil {
			return fmt.Errorf("%w: op %d (%s): %s", ErrInvalidOp, i, ops[i].Algorithm, err)
		}
		if ops[i].Joined && (i == 0 || ops[i].Now != ops[i-1].Now) {
			return fmt.Errorf("%w: op %d is joined to no op before it at its time", ErrInvalidOp, i)
		}
	}
	return nil
}

func checkOp(op *limiter.Op) error {
	switch {
	case op.Cost < 0:
		return errors.New("negative cost")
	case op.Now < 0 || op.Now > maxNow:
		return fmt.Errorf("now %d out of range", op.Now)
	case op.Window <= 0 || op.Window > maxWindow:
		return fmt.Errorf("window %d ms out of range", op.Window)
	}
	switch op.Algorithm {
	case descriptors.FixedWindow, descriptors.SlidingWindow:
		if op.Window%1000 != 0 {
			return fmt.Errorf("window %d ms is not a whole number of seconds", op.Window)
		}
		if op.Limit < 0 || op.Limit > maxAmount {
			return fmt.Errorf("limit %d out of range", op.Limit)
		}
	case descriptors.TokenBucket:
		if op.Burst < 0 || op.Burst > maxAmount {
			return fmt.Errorf("burst %d out of range", op.Burst)
		}
		if op.RateNum <= 0 || op.RateDen <= 0 {
			return fmt.Errorf("refill rate %d/%d is not positive", op.RateNum, op.RateDen)
		}
		// (Burst+RateNum)*RateDen < MaxExact, as the config checks it.
		hi, lo := bits.Mul64(uint64(op.Burst+op.RateNum), uint64(op.RateDen))
		if op.RateNum > maxAmount || hi != 0 || lo >= descriptors.MaxExact {
			return fmt.Errorf("refill rate %d/%d with burst %d cannot be computed exactly", op.RateNum, op.RateDen, op.Burst)
		}
	default:
		return errors.New("unknown algorithm")
	}
	if op.Calendar != nil && op.Algorithm == descriptors.TokenBucket {
		return errors.New("a calendar on a token bucket, which has no windows")
	}
	return nil
}
