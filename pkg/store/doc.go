// Package store implements limiter.Store: Redis runs the algorithms as Lua
// scripts on a Redis server (or Cluster, or Sentinel-managed server) through
// go-redis, and Memory runs the same integer arithmetic in process. Redis
// merges concurrent Takes into script calls that decide many ops each
// (lua/take.lua), tags every call so that a reply read for another call is
// caught, and never sends a call twice, nor one whose caller gave up
// before it was sent.
//
// All give identical results for identical ops and times. Every state
// they write expires once it can no longer change a decision: a fixed
// window at its end, a sliding window's counter one window later, a token
// bucket when it would be full again.
package store

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrInvalidOp marks an op outside the range the algorithms compute
// exactly, or a results slice shorter than ops. It signals a bug in the
// caller, not a store failure, so it does not wrap limiter.ErrUnavailable.
// Take checks every op before it decides any.
var ErrInvalidOp = errors.New("invalid op")

// Bounds that keep every intermediate value below descriptors.MaxExact.
const (
	// maxCost is where costs and fixed-window counters saturate (2^52).
	maxCost = 1 << 52
	// maxAmount bounds Limit and Burst (2^50 milli-requests).
	maxAmount = 1 << 50
	// maxWindow bounds Window (2^45 ms, about 1,100 years).
	maxWindow = 1 << 45
	// maxNow bounds Now (2^50 ms after the epoch).
	maxNow = 1 << 50
	// slidingSteps bounds the number of steps a sliding window is cut
	// into, so that steps*steps < 2^53.
	slidingSteps = 94_000_000
)

// checkOps reports the first op that the algorithms cannot decide exactly.
func checkOps(ops []limiter.Op, results []limiter.Result) error {
	if len(results) < len(ops) {
		return fmt.Errorf("%w: %d results for %d ops", ErrInvalidOp, len(results), len(ops))
	}
	for i := range ops {
		if err := checkOp(&ops[i]); err != nil {
			return fmt.Errorf("%w: op %d (%s): %s", ErrInvalidOp, i, ops[i].Algorithm, err)
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
	return nil
}
