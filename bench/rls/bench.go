package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fastlimit/fastlimit/bench/benchproc"
	"github.com/fastlimit/fastlimit/bench/load"
)

// Load settings that are not flags.
const (
	callTimeout = 2 * time.Second // deadline of each request
	valuePrefix = "user-"
)

// sample is one measured phase of one server.
type sample struct {
	Round         int          `json:"round"` // from 1
	Started       time.Time    `json:"started"`
	Report        *load.Report `json:"loadgen"`
	ServerCPU     float64      `json:"server_cpu_seconds"`
	RedisCPU      float64      `json:"redis_cpu_seconds"`     // summed over the masters
	RedisSysCPU   float64      `json:"redis_sys_cpu_seconds"` // the kernel's share of RedisCPU
	RedisCommands int64        `json:"redis_commands"`        // total_commands_processed delta, scripts' commands included
	RedisScripts  int64        `json:"redis_script_calls"`    // EVALSHA, EVAL and FCALL calls
	// RedisTimed is INFO commandstats' calls and µs of each of
	// benchproc.TimedCommands.
	RedisTimed [len(benchproc.TimedCommands)]benchproc.CommandTime `json:"redis_commandstats"`
	// Plain is what INFO commandstats said of the plain script's calls
	// and FastLimit's in a phase of their own after the run (plainPhase),
	// when measured.
	Plain       plainMeasure `json:"plain_script,omitzero"`
	NoRedis     bool         `json:"no_redis,omitempty"` // the null server
	Descriptors int          `json:"descriptors"`        // per decision
	Load1       float64      `json:"load1_before"`
	Load1After  float64      `json:"load1_after"`
	// OtherCPU is the machine's busy CPU time during the measured phase
	// less that of the server, its Redis and bench/rls: other processes'.
	OtherCPU float64 `json:"other_cpu_seconds"`
	Void     bool    `json:"void,omitempty"` // its round started above --max-load
}

// timed returns the commandstats delta of command name.
func (s *sample) timed(name string) benchproc.CommandTime {
	return s.RedisTimed[slices.Index(benchproc.TimedCommands[:], name)]
}

func (s *sample) decisions() float64 { return float64(s.Report.Decisions()) }

// perCall returns the counters decided per script call, 0 when no script
// ran (the reference).
func (s *sample) perCall() float64 {
	if s.RedisScripts <= 0 {
		return 0
	}
	return s.decisions() * float64(max(s.Descriptors, 1)) / float64(s.RedisScripts)
}

// otherCores is the CPU other processes used during the measured phase,
// in cores.
func (s *sample) otherCores() float64 {
	if s.Report == nil || s.Report.Seconds <= 0 {
		return 0
	}
	return s.OtherCPU / s.Report.Seconds
}

// perDecision returns seconds of CPU per decision in µs.
func (s *sample) perDecision(seconds float64) float64 {
	if s.decisions() == 0 {
		return 0
	}
	return seconds * 1e6 / s.decisions()
}

// runResult holds the samples of one runSpec: Samples[i] are binary i's,
// one per round, nil when the binary does not support the run.
type runResult struct {
	Spec    runSpec     `json:"run"`
	Samples [][]*sample `json:"samples"`
	Rounds  []round     `json:"rounds"`
}

// round is one measurement of a run by every server in turn.
type round struct {
	Round      int       `json:"round"` // from 1
	Started    time.Time `json:"started"`
	Waited     float64   `json:"waited_seconds,omitempty"` // for the load to fall (--wait-quiet)
	LoadBefore float64   `json:"load1_before"`
	LoadAfter  float64   `json:"load1_after"`
	Void       bool      `json:"void,omitempty"`
}

// results are what a run measured, for the report and the raw JSON.
type results struct {
	Machine  machine      `json:"machine"`
	Settings settings     `json:"settings"`
	Binaries []binaryInfo `json:"servers"`
	Runs     []*runResult `json:"runs"`
	Seconds  float64      `json:"seconds"`
}

// settings are the run's parameters, as the report states them.
type settings struct {
	Command    string  `json:"command"`
	Rounds     int     `json:"rounds"`
	MaxLoad    float64 `json:"max_load"`
	WaitQuiet  string  `json:"wait_quiet"`
	IgnoreLoad bool    `json:"ignore_load,omitempty"`
	Duration   string  `json:"duration"`
	Warmup     string  `json:"warmup"`
	Callers    int     `json:"callers"`
	Conns      int     `json:"conns"`
	Keys       int64   `json:"keys"`
	Sweep      []int   `json:"sweep,omitempty"`
	Rates      []int   `json:"rates,omitempty"`
	Redis      string  `json:"redis"`
	Timeout    float64 `json:"call_timeout_seconds"`
}

type binaryInfo struct {
	Name    string   `json:"name"`
	Role    role     `json:"role"`
	Path    string   `json:"path"`
	Version string   `json:"version"`
	Kind    string   `json:"configured_by"`
	Args    []string `json:"extra_flags,omitempty"`
	Env     []string `json:"extra_env,omitempty"`
}

// find returns the result of spec, or nil.
func (r *results) find(spec runSpec) *runResult {
	for _, rr := range r.Runs {
		if rr.Spec == spec {
			return rr
		}
	}
	return nil
}

// bench runs the plan: for each deployment (single Redis, then Cluster),
// it starts every server on its own Redis, then runs each spec for every
// round, the servers taking turns (A, B, then B, A, ...), so that a
// machine that gets busier or quieter affects both alike.
type bench struct {
	o     *options
	bins  []*binary
	tools redisTools
	ps    *procs
	pp    benchproc.Ports
	rules string // directory of writeRules
	log   io.Writer
	start time.Time
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "[bench %4.0fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bench) run(ctx context.Context, res *results) error {
	specs := plan(b.o)
	total := 0
	for _, spec := range specs {
		rr := &runResult{Spec: spec, Samples: make([][]*sample, len(b.bins))}
		res.Runs = append(res.Runs, rr)
		for _, bin := range b.bins {
			if bin.supports(spec.Key) {
				total += b.o.rounds
			}
		}
	}
	// About a second per measurement goes to connecting and reading CPU.
	eta := time.Duration(total)*(b.o.duration+b.o.warmup+time.Second) + 10*time.Second
	b.logf("%d measurements of %v (after %v of warmup): about %v", total, b.o.duration, b.o.warmup, eta.Round(time.Second))
	done := 0
	for _, cluster := range []bool{false, true} {
		var group []*runResult
		for _, rr := range res.Runs {
			if rr.Spec.Cluster == cluster {
				group = append(group, rr)
			}
		}
		if len(group) == 0 {
			continue
		}
		servers, err := b.startServers(ctx, cluster)
		if err != nil {
			return err
		}
		for _, rr := range group {
			for r := range b.o.rounds {
				rd, err := b.startRound(ctx, r)
				if err != nil {
					return err
				}
				for _, i := range turns(len(servers), r) {
					srv := servers[i]
					if !b.bins[i].supports(rr.Spec.Key) {
						continue
					}
					s, err := b.measure(ctx, srv, rr.Spec, r)
					if err != nil {
						return fmt.Errorf("%s, round %d, %s: %w", rr.Spec.title(), r+1, b.bins[i].name, err)
					}
					s.Void = rd.Void
					rr.Samples[i] = append(rr.Samples[i], s)
					done++
					b.logf("%d/%d %s round %d %s: %.0f/s p50 %s p99 %s, CPU per decision: server %.0f µs, Redis %.2f µs (kernel %.2f), loadgen %.0f µs; %.1f per script call; errors %d; load %.2f, other CPU %.2f cores%s",
						done, total, rr.Spec.short(), r+1, b.bins[i].name, s.Report.DecisionsPerSec,
						fmtUS(s.Report.Latency.P50), fmtUS(s.Report.Latency.P99),
						s.perDecision(s.ServerCPU), s.perDecision(s.RedisCPU), s.perDecision(s.RedisSysCPU),
						s.perDecision(s.Report.CPUSeconds), s.perCall(), s.Report.Errors, s.Load1, s.otherCores(), voidMark(s.Void))
				}
				rd.LoadAfter = loadAverage()
				rr.Rounds = append(rr.Rounds, rd)
			}
		}
		for _, srv := range servers {
			srv.stop(b.ps)
		}
	}
	return nil
}

// turns is the order n servers take their turns in round r: forward in
// even rounds, backward in odd ones (A, B; B, A; ...), so that neither is
// always measured on the machine the other just warmed.
func turns(n, r int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
		if r%2 == 1 {
			out[i] = n - 1 - i
		}
	}
	return out
}

// startServers starts each binary's Redis (one redis-server, or a Cluster;
// none for the null server) and then the binary on it.
func (b *bench) startServers(ctx context.Context, cluster bool) ([]*server, error) {
	var out []*server
	for _, bin := range b.bins {
		var rd *redisDeploy
		if bin.kind != kindNull {
			var err error
			if rd, err = startRedis(ctx, b.ps, &b.pp, b.tools, bin.name, cluster); err != nil {
				return nil, err
			}
		}
		srv, err := startServer(ctx, b.ps, &b.pp, bin, rd, b.rules, b.o.profile != "" && bin.kind != kindReference)
		if err != nil {
			return nil, err
		}
		if rd == nil {
			b.logf("%s (pid %d) on %s", bin.name, srv.p.pid(), srv.grpc)
		} else {
			b.logf("%s (pid %d) on %s, with %s on %v", bin.name, srv.p.pid(), srv.grpc, rd.describe(), rd.addrs)
		}
		out = append(out, srv)
	}
	return out, nil
}

// startRound waits, up to --wait-quiet, for the 1-minute load to fall to
// --max-load, and returns the round: void if it did not (unless
// --ignore-load).
func (b *bench) startRound(ctx context.Context, r int) (round, error) {
	o := b.o
	rd := round{Round: r + 1, LoadBefore: loadAverage()}
	if !o.ignoreLoad && rd.LoadBefore > o.maxLoad && o.waitQuiet > 0 {
		start := time.Now()
		b.logf("1-minute load %.2f is above %.2f: waiting up to %v for it to fall", rd.LoadBefore, o.maxLoad, o.waitQuiet)
		for rd.LoadBefore > o.maxLoad && time.Since(start) < o.waitQuiet {
			select {
			case <-ctx.Done():
				return rd, ctx.Err()
			case <-time.After(min(loadPoll, o.waitQuiet-time.Since(start))):
			}
			rd.LoadBefore = loadAverage()
		}
		rd.Waited = time.Since(start).Seconds()
	}
	rd.Void = !o.ignoreLoad && rd.LoadBefore > o.maxLoad
	if rd.Void {
		b.logf("round %d starts with the 1-minute load at %.2f, above %.2f: void", rd.Round, rd.LoadBefore, o.maxLoad)
	}
	rd.Started = time.Now()
	return rd, nil
}

// loadPoll is how often a round that waits reads the load (the kernel
// updates it every 5 s); tests shorten it.
var loadPoll = 5 * time.Second

// voidMark is the progress lines' mark of a void round.
func voidMark(void bool) string {
	if void {
		return " (void)"
	}
	return ""
}

// measure runs the warmup and then the measured phase of spec against
// srv, reading the CPU time of srv and its Redis just before and just
// after the measured phase (no request is in flight at either moment).
func (b *bench) measure(ctx context.Context, srv *server, spec runSpec, round int) (*sample, error) {
	g, err := load.Dial(ctx, load.Config{
		Addr: srv.grpc, Callers: spec.Callers, Rate: float64(spec.Rate), Conns: b.o.conns, Timeout: callTimeout,
		Keys: spec.keys(b.o.keys), Pick: load.PickUniform, Descriptors: spec.Descriptors,
		Domain: rulesDomain, EntryKeys: []string{spec.Key}, ValuePrefix: valuePrefix,
		// The same draws for every server in a round.
		Seed: uint64(round + 1),
	})
	if err != nil {
		return nil, srv.p.failure(err)
	}
	defer g.Close()
	if b.o.warmup > 0 {
		g.Run(ctx, b.o.warmup)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &sample{Round: round + 1, Started: time.Now(), Load1: loadAverage(), Descriptors: spec.Descriptors, NoRedis: srv.redis == nil}
	cpu0, r0, err := srv.usage(ctx)
	if err != nil {
		return nil, err
	}
	prof := b.startProfile(ctx, srv, spec, round)
	m0, _ := benchproc.MachineCPU()
	s.Report = g.Run(ctx, b.o.duration)
	m1, _ := benchproc.MachineCPU()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cpu1, r1, err := srv.usage(ctx)
	if err != nil {
		return nil, err
	}
	if err := prof(); err != nil {
		return nil, err
	}
	s.Load1After = loadAverage()
	s.ServerCPU = (cpu1 - cpu0).Seconds()
	if srv.redis != nil {
		if err := srv.redis.alive(); err != nil {
			return nil, err
		}
		dr := r1.Sub(r0)
		s.RedisCPU = dr.CPU.Seconds()
		s.RedisSysCPU = dr.Sys.Seconds()
		s.RedisScripts = dr.Scripts
		s.RedisTimed = dr.Timed
		// The first INFO of each node is in the delta.
		s.RedisCommands = dr.Commands - int64(len(srv.redis.addrs))
	}
	if m0 > 0 && m1 > m0 {
		s.OtherCPU = max((m1-m0).Seconds()-s.ServerCPU-s.RedisCPU-s.Report.CPUSeconds, 0)
	}
	if measuresPlain(srv, spec) && s.Report.Decisions() > 0 {
		if s.Plain, err = plainPhase(ctx, srv, g, spec, round, spec.keys(b.o.keys), b.o.duration); err != nil {
			return nil, err
		}
	}
	switch {
	case s.Report.Decisions() == 0:
		return nil, srv.p.failure(fmt.Errorf("no decision in %v: %d errors (%v), first: %s",
			b.o.duration, s.Report.Errors, s.Report.ErrorCodes, s.Report.FirstError))
	case spec.store() && srv.redis != nil && s.RedisCommands <= 0:
		return nil, srv.p.failure(errors.New("decided without sending any command to Redis: are its rules loaded?"))
	}
	return s, nil
}
