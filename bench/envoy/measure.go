package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/bench/benchproc"
)

// setup is one configuration measured: an Envoy, and the rate-limit
// server and redis-server behind it, when it has them.
type setup struct {
	name   string
	envoy  *proc
	server *proc        // nil: no rate-limit filter
	redis  *redisServer // nil: no Redis
	client *client
}

// usage is the CPU the processes of a setup have used so far.
type usage struct {
	envoy, server, redis time.Duration
}

func (s *setup) usage(ctx context.Context) (usage, error) {
	var u usage
	var err error
	if u.envoy, err = s.envoy.cpu(); err != nil {
		return u, err
	}
	if s.server != nil {
		if u.server, err = s.server.cpu(); err != nil {
			return u, err
		}
	}
	if s.redis != nil {
		if u.redis, err = s.redis.cpu(ctx); err != nil {
			return u, err
		}
	}
	return u, nil
}

// measurement is one setup under one load in one round.
type measurement struct {
	sample
	cpu usage // used during the measurement
}

// results are everything a run measured.
type results struct {
	setups  []string
	loads   []load
	rounds  int
	runs    map[string][]measurement // by key(load, setup), one per round
	o       *options
	machine machineInfo
}

func key(l load, setup string) string { return l.String() + "|" + setup }

// machineInfo are the facts a reader needs to weigh the figures.
type machineInfo struct {
	cpu, envoy, loadBefore, loadAfter, date string
	cores                                   int
}

// setupNames are the setups in the report's order; the first has no
// filter, the baseline of the latency the rate-limit call adds.
const (
	noFilter        = "no filter"
	fastlimitMemory = "FastLimit (memory)"
	fastlimitRedis  = "FastLimit (Redis)"
	referenceRedis  = "reference (Redis)"
)

// startSetups starts the upstream and every setup.
func startSetups(ctx context.Context, o *options, ps *procs, logf func(string, ...any)) ([]*setup, error) {
	up, err := startUpstream(ctx)
	if err != nil {
		return nil, err
	}
	rulesDir := filepath.Join(ps.dir, "rules")
	if err := writeRules(rulesDir); err != nil {
		return nil, err
	}
	logf("building ./cmd/server")
	fl, err := buildFastLimit(ctx, ps.dir)
	if err != nil {
		return nil, err
	}
	var setups []*setup
	add := func(name string, server *proc, rls string, r *redisServer) error {
		e, listen, err := startEnvoy(ctx, ps, o.envoy, name, func(listen, admin string) string {
			return bootstrap(listen, admin, up, rls, o.timeout)
		})
		if err != nil {
			return err
		}
		setups = append(setups, &setup{name: name, envoy: e, server: server, redis: r, client: newClient(listen, o.users)})
		return nil
	}
	if err := add(noFilter, nil, "", nil); err != nil {
		return nil, err
	}
	p, addr, err := startFastLimit(ctx, ps, fl, rulesDir, fastlimitMemory, nil)
	if err != nil {
		return nil, err
	}
	if err := add(fastlimitMemory, p, addr, nil); err != nil {
		return nil, err
	}
	r, err := startRedis(ctx, ps, fastlimitRedis)
	if err != nil {
		return nil, err
	}
	if p, addr, err = startFastLimit(ctx, ps, fl, rulesDir, fastlimitRedis, r); err != nil {
		return nil, err
	}
	if err := add(fastlimitRedis, p, addr, r); err != nil {
		return nil, err
	}
	if o.reference == "" || o.reference == "none" {
		logf("no reference: set --reference or FASTLIMIT_REFERENCE_BIN to measure envoyproxy/ratelimit too")
		return setups, nil
	}
	if r, err = startRedis(ctx, ps, referenceRedis); err != nil {
		return nil, err
	}
	if p, addr, err = startReference(ctx, ps, o.reference, rulesDir, r); err != nil {
		return nil, err
	}
	if err := add(referenceRedis, p, addr, r); err != nil {
		return nil, err
	}
	return setups, nil
}

// measure runs every load on every setup, round after round, the setups
// taking turns in an order that rotates each round.
func measure(ctx context.Context, o *options, ps *procs, logf func(string, ...any)) (*results, error) {
	res := &results{rounds: o.rounds, runs: map[string][]measurement{}, o: o, machine: readMachine(ctx, o.envoy)}
	setups, err := startSetups(ctx, o, ps, logf)
	if err != nil {
		return nil, err
	}
	for _, s := range setups {
		res.setups = append(res.setups, s.name)
	}
	for _, r := range o.rates {
		res.loads = append(res.loads, load{rate: r})
	}
	for _, c := range o.conns {
		res.loads = append(res.loads, load{conns: c})
	}
	for round := range o.rounds {
		for _, l := range res.loads {
			for i := range setups {
				s := setups[(i+round)%len(setups)]
				logf("round %d/%d, %s, %s (load average %s)", round+1, o.rounds, l, s.name, benchproc.LoadAverages())
				if o.warmup > 0 {
					s.client.run(ctx, l, o.warmup)
				}
				before, err := s.usage(ctx)
				if err != nil {
					return nil, err
				}
				smp := s.client.run(ctx, l, o.duration)
				after, err := s.usage(ctx)
				if err != nil {
					return nil, err
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				res.runs[key(l, s.name)] = append(res.runs[key(l, s.name)], measurement{sample: smp,
					cpu: usage{after.envoy - before.envoy, after.server - before.server, after.redis - before.redis}})
			}
		}
	}
	res.machine.loadAfter = benchproc.LoadAverages()
	return res, nil
}

// readMachine reads the CPU model, cores, load and Envoy's version.
func readMachine(ctx context.Context, envoy string) machineInfo {
	m := machineInfo{cpu: "unknown", envoy: envoyVersion(ctx, envoy), loadBefore: benchproc.LoadAverages(),
		date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), cores: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func (m machineInfo) String() string {
	return fmt.Sprintf("%s, %d cores; Envoy %s; load average %s before, %s after; %s",
		m.cpu, m.cores, m.envoy, m.loadBefore, m.loadAfter, m.date)
}
