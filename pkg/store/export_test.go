package store

import "github.com/fastlimit/fastlimit/pkg/limiter"

// Digests of the scripts, for tests that check what Redis holds.
var (
	TakeSHA      = takeScript.sha
	TakeCrossSHA = takeCrossScript.sha
	AtomicSHA    = atomicScript.sha
)

// TakeArgs returns the KEYS and ARGV of a take.lua call of one op with
// tag.
func TakeArgs(tag int64, op limiter.Op) ([]string, []any) {
	var enc takeEncoder
	ops := []limiter.Op{op}
	enc.plan(ops)
	var a anyArgs
	enc.write(&a, tag, ops, false)
	return []string{a[1].(string)}, a[2:] // after numkeys and the key
}

// SlotOf is Slot.
var SlotOf = Slot
