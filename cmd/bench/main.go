// Command bench measures FastLimit under load, and optionally a second
// rate-limit server (envoyproxy/ratelimit, or another FastLimit build)
// under the same load, and writes the figures into BENCHMARKS.md.
//
// It builds ./cmd/server, starts a redis-server (or a Redis Cluster) of its
// own for each server on free loopback ports, runs each scenario for
// --rounds rounds with the servers taking turns, reads the CPU time of
// every process (the server's from /proc, Redis' from INFO, the load
// generator's own), and prints a markdown section that it also writes
// between BENCHMARKS.md's bench markers. Everything it starts is stopped
// when it ends, fails or is interrupted.
//
//	go run ./cmd/bench                                   # FastLimit alone, ~5 min
//	go run ./cmd/bench --compare /path/to/service_cmd    # and envoyproxy/ratelimit, ~10 min
//	go run ./cmd/bench --quick --out -                   # smoke run, figures to stdout only
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line's settings.
type options struct {
	compare     string
	compareName string
	compareEnv  []string
	server      string
	serverFlags []string
	scenarios   []string
	rounds      int
	duration    time.Duration
	warmup      time.Duration
	callers     int
	conns       int
	keys        int64
	sweep       []int
	out         string // "-": stdout only
	raw         string // "": no raw JSON
	quick       bool
	install     bool
	root        string   // the FastLimit repository, "" when not in one
	args        []string // as given, for the report
}

// run is main without the process: it returns the exit code, 0 on
// success, 1 when the run failed, 2 for bad flags, 130 when interrupted.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		// A second Ctrl-C ends the process at once; the children die
		// with it (parent-death signal).
		<-ctx.Done()
		stop()
	}()
	if _, err := execute(ctx, o, stdout, stderr); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "bench: interrupted; every process it started is stopped")
			return 130
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var scen, sweep, serverFlags string
	fs.StringVar(&o.compare, "compare", "", "path of a second server binary to run under the same load: envoyproxy/ratelimit's service_cmd (configured by its environment variables) or another FastLimit build (configured by flags)")
	fs.StringVar(&o.compareName, "compare-name", "", `column title of --compare (default "reference", or "FastLimit B" for a FastLimit build)`)
	fs.Func("compare-env", "KEY=VALUE added to --compare's environment, e.g. REDIS_PIPELINE_WINDOW=150us (repeatable)", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		o.compareEnv = append(o.compareEnv, s)
		return nil
	})
	fs.StringVar(&o.server, "server", "", "FastLimit binary to measure (default: go build ./cmd/server of this tree)")
	fs.StringVar(&serverFlags, "server-flags", "--store-timeout 1s", "extra flags of every FastLimit server (a generous store timeout: a starved machine shows as latency, not as errors)")
	fs.StringVar(&scen, "scenarios", defaultScenarios, "comma-separated scenarios to run: "+scenarioNames()+", or all")
	fs.IntVar(&o.rounds, "rounds", 3, "measurements of each run per server, interleaved between the servers")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each run")
	fs.IntVar(&o.callers, "callers", 64, "concurrent callers of every scenario but the sweep")
	fs.IntVar(&o.conns, "conns", 4, "gRPC connections the callers share")
	fs.Int64Var(&o.keys, "keys", 100000, "identifiers, drawn uniformly")
	fs.StringVar(&sweep, "sweep", "1,4,16,64,256", "caller counts of the sweep scenario")
	fs.StringVar(&o.out, "out", "", `markdown file whose bench section is rewritten; "-" prints only (default BENCHMARKS.md of the repository; "-" with --quick)`)
	fs.StringVar(&o.raw, "raw", "", `file for every measurement as JSON; "-" for none (default .tmp/bench/results.json of the repository)`)
	fs.BoolVar(&o.quick, "quick", false, "smoke run: 1 s runs, 200 ms warmup, 1 round, figures to stdout only, unless those flags are given")
	fs.BoolVar(&o.install, "install", true, "install redis-server and redis-tools with apt-get when missing")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		quick := map[string]func(){
			"duration": func() { o.duration = time.Second },
			"warmup":   func() { o.warmup = 200 * time.Millisecond },
			"rounds":   func() { o.rounds = 1 },
			"out":      func() { o.out = "-" },
			"raw":      func() { o.raw = "-" },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	o.serverFlags = strings.Fields(serverFlags)
	var err error
	if o.scenarios, err = parseScenarios(scen); err != nil {
		return nil, err
	}
	if o.sweep, err = parseCallers(sweep); err != nil {
		return nil, err
	}
	o.root = repoRoot()
	return o, o.validate()
}

func (o *options) validate() error {
	switch {
	case o.rounds < 1:
		return errors.New("--rounds must be at least 1")
	case o.duration <= 0:
		return errors.New("--duration must be positive")
	case o.warmup < 0:
		return errors.New("--warmup must not be negative")
	case o.callers < 1 || o.conns < 1 || o.keys < 1:
		return errors.New("--callers, --conns and --keys must be at least 1")
	case o.root == "" && o.server == "":
		return errors.New("not in the FastLimit repository: run it there (go run ./cmd/bench), or give --server")
	case o.root == "" && (o.out == "" || o.raw == ""):
		return errors.New("not in the FastLimit repository: give --out and --raw (- for none)")
	}
	return nil
}

// parseCallers reads a comma-separated list of caller counts.
func parseCallers(list string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--sweep: %q is not a caller count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// repoRoot returns the FastLimit repository holding the working
// directory, or "".
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			if strings.Contains(string(b), "module "+fastlimitModule+"\n") {
				return dir
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

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
		Command:  "go run ./cmd/bench" + quoteArgs(o.args),
		Rounds:   o.rounds,
		Duration: o.duration.String(),
		Warmup:   o.warmup.String(),
		Callers:  o.callers,
		Conns:    o.conns,
		Keys:     o.keys,
		Sweep:    o.sweep,
		Redis:    "one per server, on loopback, without persistence (`--save '' --appendonly no`); for the cluster runs, a Redis Cluster of 3 masters per server",
		Timeout:  callTimeout.Seconds(),
	}}
	for _, bin := range b.bins {
		k := "flags"
		if bin.kind == kindReference {
			k = "environment (`REDIS_SOCKET_TYPE=tcp REDIS_TYPE REDIS_URL RUNTIME_ROOT RUNTIME_SUBDIRECTORY USE_STATSD=false LOG_LEVEL=warn` and loopback `HOST PORT GRPC_HOST GRPC_PORT DEBUG_HOST DEBUG_PORT`; defaults otherwise)"
		}
		res.Binaries = append(res.Binaries, binaryInfo{Name: bin.name, Path: bin.path, Version: bin.version, Kind: k, Args: bin.args, Env: bin.env})
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
	fl.args = o.serverFlags
	b.bins = []*binary{fl}
	if o.compare == "" {
		return nil
	}
	path, err := filepath.Abs(o.compare)
	if err != nil {
		return err
	}
	other := &binary{path: path, env: o.compareEnv}
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
	if other.name == fl.name {
		return fmt.Errorf("--compare-name %q is the name of the first server", other.name)
	}
	b.bins = append(b.bins, other)
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

// quoteArgs formats args for a shell, each after a space.
func quoteArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteByte(' ')
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			b.WriteString(a)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

// findRedis finds redis-server and redis-cli, installing Debian's
// redis-server and redis-tools with apt-get when one is missing and
// install is set.
func findRedis(ctx context.Context, install bool, log io.Writer) (redisTools, error) {
	look := func() (redisTools, error) {
		var t redisTools
		var err error
		if t.server, err = exec.LookPath("redis-server"); err != nil {
			return t, err
		}
		t.cli, err = exec.LookPath("redis-cli")
		return t, err
	}
	t, err := look()
	if err == nil || !install {
		if err != nil {
			err = fmt.Errorf("%w: install redis-server and redis-cli (Debian: apt-get install redis-server redis-tools)", err)
		}
		return t, err
	}
	apt, aptErr := exec.LookPath("apt-get")
	if aptErr != nil {
		return t, fmt.Errorf("%w, and no apt-get to install it: install redis-server and redis-cli", err)
	}
	argv := []string{apt}
	if os.Geteuid() != 0 {
		sudo, sudoErr := exec.LookPath("sudo")
		if sudoErr != nil {
			return t, fmt.Errorf("%w; installing it needs root or sudo: apt-get install redis-server redis-tools", err)
		}
		argv = []string{sudo, apt}
	}
	fmt.Fprintln(log, "bench: installing redis-server and redis-tools with apt-get")
	for _, step := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "redis-server", "redis-tools"}} {
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], step...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return t, fmt.Errorf("apt-get %s: %w\n%s", step[0], err, out)
		}
	}
	return look()
}
