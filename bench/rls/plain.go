package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/bench/benchproc"
	"github.com/fastlimit/fastlimit/bench/load"
)

// plainLibrary is the least a script can do for a fixed window's decision
// at Redis TIME (bench/callgrind's plain script), as a Redis function, so
// that INFO commandstats counts its calls (FCALL) apart from FastLimit's
// (EVALSHA) on the same Redis at the same time. A function call costs
// Redis somewhat less than the same body's EVALSHA (issue 39 counted
// 41,700 instructions against 43,300), so the ratio against it errs
// against FastLimit. Issue 39 holds a one-decision call of FastLimit's to
// 1.3x the plain script's Redis time.
const plainLibrary = `#!lua name=fastlimit_bench_plain
redis.register_function('plain', function(keys, args)
  local t = redis.call('TIME')
  local v = redis.call('INCRBY', keys[1], args[1])
  if v == tonumber(args[1]) then
    redis.call('PEXPIREAT', keys[1], args[2])
  end
  return v
end)
`

// plainEvery is how often the plain script is called beside FastLimit's
// load: often enough to count, rarely enough to leave Redis to it.
const plainEvery = time.Millisecond

// plainMeasure is what the plain phase measured: the plain script's calls
// (FCALL) and FastLimit's (EVALSHA) while both ran.
type plainMeasure struct {
	Plain     benchproc.CommandTime `json:"plain_fcall"`
	FastLimit benchproc.CommandTime `json:"fastlimit_evalsha"`
}

// ratio is FastLimit's µs a call over the plain script's, 0 unmeasured.
func (p plainMeasure) ratio() float64 {
	if p.Plain.PerCall() == 0 || p.FastLimit.PerCall() == 0 {
		return 0
	}
	return p.FastLimit.PerCall() / p.Plain.PerCall()
}

// measuresPlain says whether a run of spec by srv is followed by the plain
// phase: FastLimit at one caller, one descriptor, a fixed window, on one
// redis-server.
func measuresPlain(srv *server, spec runSpec) bool {
	return srv.bin.kind == kindFastLimit && srv.redis != nil && !srv.redis.cluster && spec.Callers == 1 &&
		spec.Descriptors == 1 && (spec.Key == "fw" || spec.Key == "fwm")
}

// plainWindows are the rules' windows, seconds.
var plainWindows = map[string]int64{"fw": 1, "fwm": 60}

// plainPhase runs FastLimit's load of the run again, on g, for d, with the
// plain script called every plainEvery beside it on the same Redis (its
// own keys, plain:{bench/KEY=user-N}:default:<window start>, identifiers
// drawn as the load's), so that both meet the same Redis: caches, the
// machine's other work. It returns INFO commandstats' figures of both
// from that phase alone, which the run's own figures leave out.
func plainPhase(ctx context.Context, srv *server, g *load.Generator, spec runSpec, round int, keys int64, d time.Duration) (plainMeasure, error) {
	c := redis.NewClient(&redis.Options{Addr: srv.redis.addrs[0], MaxRetries: -1})
	defer c.Close()
	if err := c.FunctionLoadReplace(ctx, plainLibrary).Err(); err != nil {
		return plainMeasure{}, fmt.Errorf("plain script: %w", err)
	}
	r0, err := srv.redis.stats(ctx)
	if err != nil {
		return plainMeasure{}, err
	}
	phase, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var plainErr error
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(round+1), 1))
		w := plainWindows[spec.Key]
		tick := time.NewTicker(plainEvery)
		defer tick.Stop()
		var key []byte
		for {
			select {
			case <-phase.Done():
				return
			case <-tick.C:
			}
			now := time.Now().Unix()
			start := now - now%w
			key = strconv.AppendInt(append(key[:0], "plain:{bench/"+spec.Key+"=user-"...), rng.Int64N(keys), 10)
			key = strconv.AppendInt(append(key, "}:default:"...), start, 10)
			if err := c.FCall(phase, "plain", []string{string(key)}, 1000, (start+w)*1000).Err(); err != nil && phase.Err() == nil {
				plainErr = err
				return
			}
		}
	})
	g.Run(ctx, d)
	stop()
	wg.Wait()
	if plainErr != nil {
		return plainMeasure{}, fmt.Errorf("plain script: %w", plainErr)
	}
	r1, err := srv.redis.stats(ctx)
	if err != nil {
		return plainMeasure{}, err
	}
	dr := r1.Sub(r0)
	return plainMeasure{Plain: timedOf(dr, "fcall"), FastLimit: timedOf(dr, "evalsha")}, nil
}

// timedOf is commandstats' figures of command in s.
func timedOf(s benchproc.RedisStats, command string) benchproc.CommandTime {
	for i, name := range benchproc.TimedCommands {
		if name == command {
			return s.Timed[i]
		}
	}
	return benchproc.CommandTime{}
}
