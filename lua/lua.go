// Package lua embeds the Redis scripts that implement the rate-limit
// algorithms; each script's header documents its KEYS, ARGV and reply.
package lua

import (
	_ "embed"
	"strings"
)

// Take decides independent ops of any algorithms, each on its own, in one
// script call; Fixed decides fixed-window charges of one window, cost and
// time as Take does, for less; TakeAll decides a call's ops all or nothing.
var (
	Take    = include(takeSrc)
	Fixed   = fixedSrc
	TakeAll = include(takeAllSrc)
)

// TakeCrossSlot is Take declaring the Redis 7 script flag
// allow-cross-slot-keys, so that one call on a Cluster node may carry the
// keys of every slot that node serves. Its calls declare no keys (Redis
// refuses declared keys of several slots) and send them in ARGV, as
// take.lua's header says.
var TakeCrossSlot = "#!lua flags=allow-cross-slot-keys\n" + Take

// Demand publishes and reads back the demand of RLQS clients (pkg/rlqs),
// per bucket; it takes nothing of arith.lua.
var Demand = demandSrc

var (
	//go:embed demand.lua
	demandSrc string
	//go:embed take.lua
	takeSrc string
	//go:embed fixed.lua
	fixedSrc string
	//go:embed takeall.lua
	takeAllSrc string
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
