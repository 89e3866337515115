package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/bench/benchproc"
)

// plainScript is the least a script can do for a fixed window's decision
// at Redis TIME (bench/callgrind's yardstick too): issue 39 holds a
// one-decision call of FastLimit's to 1.3x its Redis time.
const plainScript = `local t = redis.call('TIME')
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if v == tonumber(ARGV[1]) then
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return v
`

// measuresPlain says whether a run of spec by srv is followed by the plain
// script's phase: FastLimit at one caller, one descriptor, a fixed
// window, on one redis-server.
func measuresPlain(srv *server, spec runSpec) bool {
	return srv.bin.kind == kindFastLimit && srv.redis != nil && !srv.redis.cluster && spec.Callers == 1 &&
		spec.Descriptors == 1 && (spec.Key == "fw" || spec.Key == "fwm")
}

// plainWindows are the rules' windows, seconds.
var plainWindows = map[string]int64{"fw": 1, "fwm": 60}

// plainPhase calls the plain script on srv's Redis, once FastLimit's run
// has ended, as FastLimit's one caller did: warm calls unmeasured, then
// measured ones, on the identifiers its load generator drew in that
// order (the same seed: so the same share of counters created), each at
// Redis with its own key (plain:{bench/KEY=user-N}:default:<window
// start>). It returns what INFO commandstats says of the measured calls.
func plainPhase(ctx context.Context, srv *server, spec runSpec, round int, keys, warm, measured int64) (benchproc.CommandTime, error) {
	c := redis.NewClient(&redis.Options{Addr: srv.redis.addrs[0], MaxRetries: -1})
	defer c.Close()
	sha, err := c.ScriptLoad(ctx, plainScript).Result()
	if err != nil {
		return benchproc.CommandTime{}, fmt.Errorf("plain script: %w", err)
	}
	// load.newCaller's draws: caller 0's generator, seeded by the round.
	rng := rand.New(rand.NewPCG(uint64(round+1), 0))
	w := plainWindows[spec.Key]
	var key []byte
	call := func() error {
		id := rng.Int64N(keys)
		now := time.Now().Unix()
		start := now - now%w
		key = strconv.AppendInt(append(key[:0], "plain:{bench/"+spec.Key+"=user-"...), id, 10)
		key = strconv.AppendInt(append(key, "}:default:"...), start, 10)
		return c.EvalSha(ctx, sha, []string{string(key)}, 1000, (start+w)*1000).Err()
	}
	for range warm {
		if err := call(); err != nil {
			return benchproc.CommandTime{}, fmt.Errorf("plain script: %w", err)
		}
	}
	r0, err := srv.redis.stats(ctx)
	if err != nil {
		return benchproc.CommandTime{}, err
	}
	for range measured {
		if err := call(); err != nil {
			return benchproc.CommandTime{}, fmt.Errorf("plain script: %w", err)
		}
	}
	r1, err := srv.redis.stats(ctx)
	if err != nil {
		return benchproc.CommandTime{}, err
	}
	i := slices.Index(benchproc.TimedCommands[:], "evalsha")
	return benchproc.CommandTime{Calls: r1.Timed[i].Calls - r0.Timed[i].Calls, Usec: r1.Timed[i].Usec - r0.Timed[i].Usec}, nil
}
