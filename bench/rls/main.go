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
// A round is one measurement of a run by every server in turn. It is void
// when the machine's 1-minute load is above --max-load as it starts
// (--wait-quiet waits for it to fall first): void rounds are reported, and
// left out of every range and ratio.
//
//	go run ./bench/rls                                   # FastLimit alone, ~5 min
//	go run ./bench/rls --compare /path/to/service_cmd    # and envoyproxy/ratelimit, ~10 min
//	go run ./bench/rls --compare-null --variant 'batches 1=--redis-batches 1'
//	go run ./bench/rls --quick --out -                   # smoke run, figures to stdout only
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	compareNull bool
	variants    []variant
	server      string
	serverFlags []string
	maxLoad     float64       // a round starting above this 1-minute load is void
	waitQuiet   time.Duration // how long a round waits for the load to fall
	ignoreLoad  bool          // no round is void
	profile     string        // directory for FastLimit servers' CPU profiles, "" for none
	scenarios   []string
	rounds      int
	duration    time.Duration
	warmup      time.Duration
	callers     int
	conns       int
	keys        int64
	sweep       []int
	rates       []int  // of the open scenario, requests a second
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
	var scen, sweep, rates, serverFlags string
	fs.StringVar(&o.compare, "compare", "", "path of a second server binary to run under the same load: envoyproxy/ratelimit's service_cmd (configured by its environment variables) or another FastLimit build (configured by flags)")
	fs.StringVar(&o.compareName, "compare-name", "", `column title of --compare (default "reference", or "FastLimit B" for a FastLimit build)`)
	fs.Func("compare-env", "KEY=VALUE added to --compare's environment, e.g. REDIS_PIPELINE_WINDOW=150us (repeatable)", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		o.compareEnv = append(o.compareEnv, s)
		return nil
	})
	fs.BoolVar(&o.compareNull, "compare-null", false, "also measure bench/nullrls, a RateLimitService that answers OK without deciding (FastLimit's gRPC settings): the protocol's floor")
	fs.Func("variant", "NAME=FLAGS: another FastLimit server, the same binary with FLAGS after --server-flags, e.g. 'batches 1=--redis-batches 1' (repeatable)", func(s string) error {
		name, flags, ok := strings.Cut(s, "=")
		if name = strings.TrimSpace(name); !ok || name == "" || strings.TrimSpace(flags) == "" {
			return fmt.Errorf("%q is not NAME=FLAGS", s)
		}
		o.variants = append(o.variants, variant{name: name, flags: strings.Fields(flags)})
		return nil
	})
	fs.Float64Var(&o.maxLoad, "max-load", 1.0, "a round that starts with the machine's 1-minute load above this is void: reported, left out of ranges and ratios")
	fs.DurationVar(&o.waitQuiet, "wait-quiet", 0, "before each round, wait up to this long for the 1-minute load to fall to --max-load (the runs' own load decays too)")
	fs.BoolVar(&o.ignoreLoad, "ignore-load", false, "no round is void whatever the load: for smoke runs (--quick sets it)")
	fs.StringVar(&o.profile, "profile", "", "directory to write a CPU profile of each FastLimit server's and the null server's measured phase to (pprof, on an admin port)")
	fs.StringVar(&o.server, "server", "", "FastLimit binary to measure (default: go build ./cmd/server of this tree)")
	fs.StringVar(&serverFlags, "server-flags", "--store-timeout 2s --drain 0s", "extra flags of every FastLimit server (a generous store timeout, the calls' own deadline: a starved machine shows as latency, not as errors, and, as where Envoy's deadline comes before the store timeout, the server adds no timer of its own; no drain when a run stops it)")
	fs.StringVar(&scen, "scenarios", defaultScenarios, "comma-separated scenarios to run: "+scenarioNames()+"; redis-cost for "+redisCostScenarios+"; concurrency for "+concurrencyScenarios+"; fleet for "+fleetScenarios+"; or all")
	fs.IntVar(&o.rounds, "rounds", 3, "measurements of each run per server, interleaved between the servers")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each run")
	fs.IntVar(&o.callers, "callers", 64, "concurrent callers of every scenario but the sweep")
	fs.IntVar(&o.conns, "conns", 4, "gRPC connections the callers share")
	fs.Int64Var(&o.keys, "keys", 100000, "identifiers, drawn uniformly")
	fs.StringVar(&sweep, "sweep", "1,4,16,64,256", "caller counts of the sweep scenario")
	fs.StringVar(&rates, "rates", "500,2000,5000", "request rates a second of the open scenario (open loop: Poisson arrivals at that mean, whatever the server does)")
	fs.StringVar(&o.out, "out", "", `markdown file whose bench section is rewritten; "-" prints only (default BENCHMARKS.md of the repository; "-" with --quick)`)
	fs.StringVar(&o.raw, "raw", "", `file for every measurement as JSON; "-" for none (default .tmp/bench/results.json of the repository)`)
	fs.BoolVar(&o.quick, "quick", false, "smoke run: 1 s runs, 200 ms warmup, 1 round, figures to stdout only, unless those flags are given")
	fs.BoolVar(&o.install, "install", true, "install redis-server and redis-tools with apt-get when missing")
	top := fs.Bool("top", true, "FastLimit servers keep the top identifiers (their default); false adds --top-keys 0, to measure what keeping them costs")
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
			"duration":    func() { o.duration = time.Second },
			"warmup":      func() { o.warmup = 200 * time.Millisecond },
			"rounds":      func() { o.rounds = 1 },
			"out":         func() { o.out = "-" },
			"raw":         func() { o.raw = "-" },
			"ignore-load": func() { o.ignoreLoad = true },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	o.serverFlags = strings.Fields(serverFlags)
	if !*top {
		o.serverFlags = append(o.serverFlags, "--top-keys", "0")
	}
	var err error
	if o.scenarios, err = parseScenarios(scen); err != nil {
		return nil, err
	}
	if o.sweep, err = parseCallers("--sweep", sweep); err != nil {
		return nil, err
	}
	if o.rates, err = parseCallers("--rates", rates); err != nil {
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
	case o.maxLoad < 0 || o.waitQuiet < 0:
		return errors.New("--max-load and --wait-quiet must not be negative")
	case o.root == "" && o.server == "":
		return errors.New("not in the FastLimit repository: run it there (go run ./bench/rls), or give --server")
	case o.root == "" && (o.out == "" || o.raw == ""):
		return errors.New("not in the FastLimit repository: give --out and --raw (- for none)")
	}
	return nil
}

// variant is a FastLimit server with flags of its own (--variant).
type variant struct {
	name  string
	flags []string
}

// parseCallers reads flag name's comma-separated list of positive counts
// (callers, rates).
func parseCallers(name, list string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive count", name, f)
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
