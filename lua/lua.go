// Package lua embeds the Redis scripts that implement the rate-limit
// algorithms; each script's header documents its KEYS, ARGV and reply.
package lua

import (
	_ "embed"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// The scripts, one per algorithm, as sent to Redis.
var (
	FixedWindow   = include(fixedWindowSrc)
	SlidingWindow = include(slidingWindowSrc)
	TokenBucket   = include(tokenBucketSrc)
)

// Atomic decides several ops of any algorithms all or nothing, in one call.
var Atomic = include(atomicSrc)

var (
	//go:embed fixed_window.lua
	fixedWindowSrc string
	//go:embed sliding_window.lua
	slidingWindowSrc string
	//go:embed token_bucket.lua
	tokenBucketSrc string
	//go:embed atomic.lua
	atomicSrc string
	//go:embed arith.lua
	arith string
)

// includeLine marks where a script takes arith.lua: Redis runs one chunk
// per script, so the shared arithmetic is pasted in rather than required.
const includeLine = "-- #include arith.lua\n"

// include returns src with arith.lua in place of its include line.
func include(src string) string {
	return strings.Replace(src, includeLine, arith, 1)
}

// Script returns the script that implements alg, or "" for an unknown
// algorithm.
func Script(alg descriptors.Algorithm) string {
	switch alg {
	case descriptors.FixedWindow:
		return FixedWindow
	case descriptors.SlidingWindow:
		return SlidingWindow
	case descriptors.TokenBucket:
		return TokenBucket
	}
	return ""
}
