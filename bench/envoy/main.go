// Command envoy measures rate limiting through one real Envoy: HTTP
// requests from a load generator, through Envoy (--concurrency 1) to a
// trivial upstream, with Envoy's rate-limit filter asking FastLimit (on
// its embedded store, and on Redis), the pinned envoyproxy/ratelimit (on
// Redis), or with no rate-limit filter at all.
//
// Each setup runs its own Envoy, server and redis-server on loopback, all
// started before the first measurement and stopped at the end. For each
// load (open loop at fixed rates, closed loop at a number of connections)
// the setups take turns, in an order that rotates from round to round. It
// reports requests/s, latency (p50, p99), the latency the rate-limit call
// adds (over the setup without a filter, at the same load) and the CPU
// time per request of Envoy, the rate-limit server and Redis (from
// /proc and INFO), the medians of the rounds with their ranges, and writes
// the markdown section between BENCHMARKS.md's bench-envoy markers.
//
//	go run ./bench/envoy                        # ~8 min; Envoy and the reference from FASTLIMIT_ENVOY_BIN, FASTLIMIT_REFERENCE_BIN
//	go run ./bench/envoy --quick --out -        # a smoke run of a minute, to stdout
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	envoy     string
	reference string
	rounds    int
	duration  time.Duration
	warmup    time.Duration
	rates     []int // open-loop loads, requests/s
	conns     []int // closed-loop loads, connections
	users     int
	timeout   time.Duration // the filter's timeout
	out       string
	quick     bool
	args      []string
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench/envoy:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := execute(ctx, o, stdout, stderr); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "bench/envoy: interrupted; every process it started is stopped")
			return 130
		}
		fmt.Fprintln(stderr, "bench/envoy:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("bench/envoy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rates, conns string
	fs.StringVar(&o.envoy, "envoy", os.Getenv("FASTLIMIT_ENVOY_BIN"), "Envoy binary (default $FASTLIMIT_ENVOY_BIN, which scripts/test.sh installs)")
	fs.StringVar(&o.reference, "reference", os.Getenv("FASTLIMIT_REFERENCE_BIN"), `envoyproxy/ratelimit's service_cmd (default $FASTLIMIT_REFERENCE_BIN); "none" leaves it out`)
	fs.IntVar(&o.rounds, "rounds", 3, "rounds: each measures every load on every setup once")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of one measurement")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "load sent before each measurement, not counted")
	fs.StringVar(&rates, "rates", "500,2000", "open-loop loads, requests/s, comma-separated (empty: none)")
	fs.StringVar(&conns, "conns", "16", "closed-loop loads, connections each sending its next request when the last is answered, comma-separated (empty: none)")
	fs.IntVar(&o.users, "users", 1000, "distinct x-user values, one rate-limit counter each, sent in turn")
	fs.DurationVar(&o.timeout, "timeout", 100*time.Millisecond, "the rate-limit filter's timeout (failure_mode_deny: true, so that a failed call shows as an error)")
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", `file whose bench-envoy section is replaced ("-": stdout only)`)
	fs.BoolVar(&o.quick, "quick", false, "a smoke run: one round of 2s after 0.5s, at 200/s and 4 connections")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.rates, err = parseInts(rates); err != nil {
		return nil, fmt.Errorf("--rates: %w", err)
	}
	if o.conns, err = parseInts(conns); err != nil {
		return nil, fmt.Errorf("--conns: %w", err)
	}
	if o.quick {
		o.rounds, o.duration, o.warmup, o.rates, o.conns = 1, 2*time.Second, 500*time.Millisecond, []int{200}, []int{4}
	}
	switch {
	case o.envoy == "":
		return nil, errors.New("no Envoy: set --envoy or FASTLIMIT_ENVOY_BIN (scripts/test.sh installs Envoy 1.40.0)")
	case o.rounds < 1 || o.duration <= 0 || o.warmup < 0 || o.users < 1 || o.timeout <= 0:
		return nil, errors.New("--rounds, --duration, --users and --timeout must be positive, --warmup not negative")
	case len(o.rates)+len(o.conns) == 0:
		return nil, errors.New("no load: give --rates or --conns")
	}
	return o, nil
}

// parseInts reads "1,2,3"; "" is none.
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// execute starts every setup, measures, and writes the report.
func execute(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	dir, err := os.MkdirTemp("", "bench-envoy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ps := &procs{dir: dir}
	defer ps.stopAll()
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }

	res, err := measure(ctx, o, ps, logf)
	if err != nil {
		return err
	}
	section := render(res)
	fmt.Fprint(stdout, section)
	if o.out == "-" {
		return nil
	}
	doc, err := os.ReadFile(o.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	updated, err := replaceSection(string(doc), section)
	if err != nil {
		return fmt.Errorf("%s: %w", o.out, err)
	}
	if err := os.WriteFile(o.out, []byte(updated), 0o644); err != nil {
		return err
	}
	logf("wrote the bench-envoy section of %s", o.out)
	return nil
}
