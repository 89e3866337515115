package store

import "github.com/fastlimit/fastlimit/pkg/limiter"

// Digests of the scripts, for tests that check what Redis holds.
var (
	TakeSHA      = takeScript.sha
	TakeCrossSHA = takeCrossScript.sha
	FixedSHA     = fixedScript.sha
	TakeAllSHA   = takeAllScript.sha
)

// TakeArgs returns the script, KEYS and ARGV of the call of one op with
// tag that Take sends (to take.lua or fixed.lua).
func TakeArgs(tag int64, op limiter.Op) (sha string, keys []string, argv []any) {
	var enc takeEncoder
	ops := []limiter.Op{op}
	enc.plan(ops, takeScript)
	var a anyArgs
	enc.write(&a, tag, ops)
	return enc.script.sha, []string{a[1].(string)}, a[2:] // after numkeys and the key
}

// SlotOf is Slot.
var SlotOf = Slot
