package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// execute runs the benchmark o describes, prints the report to stdout and
// writes it and the raw results where o says. Progress goes to stderr.
func execute(ctx context.Context, o *options, stdout, stderr io.Writer) (*results, error) {
	tools, err := findRedis(ctx, o.install, stderr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fastlimit-bench-")
	if err != nil {
		return nil, err
	}
	ps := &procs{dir: dir}
	b := &bench{o: o, tools: tools, ps: ps, rules: filepath.Join(dir, "rules"), log: stderr, start: time.Now()}
	res, err := b.execute(ctx)
	ps.stopAll()
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(stderr, "bench: logs of every process are in %s\n", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	_ = os.RemoveAll(dir)
	section := render(res)
	if _, err := io.WriteString(stdout, section); err != nil {
		return nil, err
	}
	if err := o.write(res, section); err != nil {
		return nil, err
	}
	return res, nil
}

// execute prepares the servers and runs the plan.
func (b *bench) execute(ctx context.Context) (*results, error) {
	o := b.o
	if err := writeRules(b.rules); err != nil {
		return nil, err
	}
	if err := b.binaries(ctx); err != nil {
		return nil, err
	}
	res := &results{Machine: readMachine(ctx, b.tools.server), Settings: settings{
		Command:    "go run ./bench/rls" + quoteArgs(o.args),
		Rounds:     o.rounds,
		MaxLoad:    o.maxLoad,
		WaitQuiet:  o.waitQuiet.String(),
		IgnoreLoad: o.ignoreLoad,
		Duration:   o.duration.String(),
		Warmup:     o.warmup.String(),
		Callers:    o.callers,
		Conns:      o.conns,
		Keys:       o.keys,
		Sweep:      o.sweep,
		Rates:      o.rates,
		Redis:      "one per server, on loopback, without persistence (`--save '' --appendonly no`); for the cluster runs, a Redis Cluster of 3 masters per server",
		Timeout:    callTimeout.Seconds(),
	}}
	for _, bin := range b.bins {
		k := "flags"
		if bin.kind == kindReference {
			k = "environment (`REDIS_SOCKET_TYPE=tcp REDIS_TYPE REDIS_URL RUNTIME_ROOT RUNTIME_SUBDIRECTORY USE_STATSD=false LOG_LEVEL=warn` and loopback `HOST PORT GRPC_HOST GRPC_PORT DEBUG_HOST DEBUG_PORT`; defaults otherwise)"
		}
		path := bin.path
		if bin.built {
			path = "./cmd/server"
		}
		if bin.kind == kindNull {
			k = "flags (`--grpc-addr --http-addr`; no Redis)"
			path = "./bench/nullrls"
		}
		res.Binaries = append(res.Binaries, binaryInfo{Name: bin.name, Role: bin.role, Path: path, Version: bin.version, Kind: k, Args: bin.args, Env: bin.env})
	}
	if err := b.run(ctx, res); err != nil {
		return nil, err
	}
	res.Machine.LoadAfter = loadAverages()
	res.Seconds = time.Since(b.start).Seconds()
	return res, nil
}

// binaries builds or inspects FastLimit, and inspects --compare.
func (b *bench) binaries(ctx context.Context) error {
	o := b.o
	var fl *binary
	if o.server != "" {
		fl = &binary{name: "FastLimit", path: o.server}
		if err := fl.inspect(); err != nil {
			return err
		}
		if fl.kind != kindFastLimit {
			return fmt.Errorf("--server %s is not a FastLimit build (its Go build information names another module)", o.server)
		}
	} else {
		b.logf("building ./cmd/server")
		var err error
		if fl, err = buildFastLimit(ctx, o.root, b.ps.dir); err != nil {
			return err
		}
	}
	fl.args, fl.role = o.serverFlags, roleFastLimit
	b.bins = []*binary{fl}
	for _, v := range o.variants {
		vb := *fl
		vb.name, vb.role, vb.args = v.name, roleVariant, append(slices.Clip(o.serverFlags), v.flags...)
		b.bins = append(b.bins, &vb)
	}
	if o.compare != "" {
		path, err := filepath.Abs(o.compare)
		if err != nil {
			return err
		}
		other := &binary{path: path, env: o.compareEnv, role: roleCompare}
		if err := other.inspect(); err != nil {
			return fmt.Errorf("--compare: %w", err)
		}
		other.name = o.compareName
		if other.name == "" {
			other.name = "reference"
			if other.kind == kindFastLimit {
				other.name = "FastLimit B"
			}
		}
		if other.kind == kindFastLimit {
			other.args = o.serverFlags
		}
		b.bins = append(b.bins, other)
	}
	if o.compareNull {
		if o.root == "" {
			return errors.New("--compare-null builds ./bench/nullrls: run bench/rls in the FastLimit repository")
		}
		b.logf("building ./bench/nullrls")
		null, err := buildNull(ctx, o.root, b.ps.dir)
		if err != nil {
			return err
		}
		b.bins = append(b.bins, null)
	}
	names := map[string]bool{}
	for _, bin := range b.bins {
		if names[bin.name] {
			return fmt.Errorf("two servers are named %q (--variant, --compare-name)", bin.name)
		}
		names[bin.name] = true
	}
	return nil
}

// write writes the section into o.out and the results into o.raw.
func (o *options) write(res *results, section string) error {
	out, raw := o.out, o.raw
	if out == "" {
		out = filepath.Join(o.root, "BENCHMARKS.md")
	}
	if raw == "" {
		raw = filepath.Join(o.root, ".tmp", "bench", "results.json")
	}
	if out != "-" {
		if err := writeSection(out, section); err != nil {
			return err
		}
	}
	if raw != "-" {
		if err := os.MkdirAll(filepath.Dir(raw), 0o755); err != nil {
			return err
		}
		j, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(raw, append(j, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
