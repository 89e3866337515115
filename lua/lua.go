// Package lua embeds the Redis scripts that implement the rate-limit
// algorithms; each script's header documents its KEYS, ARGV and reply.
package lua

import (
	_ "embed"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// The scripts, one per algorithm.
var (
	//go:embed fixed_window.lua
	FixedWindow string
	//go:embed sliding_window.lua
	SlidingWindow string
	//go:embed token_bucket.lua
	TokenBucket string
)

// Atomic decides several ops of any algorithms all or nothing, in one call.
//
//go:embed atomic.lua
var Atomic string

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
