// Command loadgen drives a RateLimitService (FastLimit, or any server that
// speaks envoy.service.ratelimit.v3) over gRPC and reports decisions per
// second, OK/OVER_LIMIT counts, errors and latency percentiles.
//
// N callers share M connections round-robin, each with one request in
// flight (closed loop); or, with -rate, requests arrive at that mean rate
// as a Poisson process whatever the server does (open loop), each timed
// from its intended send time. Each request carries 1..n
// descriptors of one entry, whose values are drawn from a keyspace of K
// identifiers, uniformly or in sequence. A run lasts -d, or stops earlier
// after -n requests; every call is bounded by -timeout.
//
//	loadgen -addr 127.0.0.1:8081 -c 64 -conns 4 -d 10s -keys 10000 -domain bench -key fw
//	loadgen -addr 127.0.0.1:8081 -rate 2000 -d 10s -keys 100000 -key fw
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fastlimit/fastlimit/bench/load"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code, 0 when the
// run completed (errors from the server are reported, not fatal), 1 when
// it could not reach the server, 2 for bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, err := load.Dial(ctx, cfg.Config)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	defer g.Close()
	if cfg.warmup > 0 {
		g.Run(ctx, cfg.warmup)
	}
	rep := g.Run(ctx, cfg.duration)
	if cfg.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	return 0
}

// config is a run's settings: the load's, and the phases'.
type config struct {
	load.Config
	duration time.Duration // measured phase; always bounds the run
	warmup   time.Duration
	json     bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var keys string
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8081", "gRPC address of the rate-limit server")
	fs.IntVar(&c.Callers, "c", 64, "concurrent callers, each with one request in flight")
	fs.Float64Var(&c.Rate, "rate", 0, "open loop: requests a second, arriving as a Poisson process whatever the server does, latency from each one's intended send time (-c is then ignored)")
	fs.IntVar(&c.Conns, "conns", 4, "gRPC connections; callers are spread over them round-robin")
	fs.DurationVar(&c.duration, "d", 10*time.Second, "measured duration (always bounds the run)")
	fs.Int64Var(&c.Requests, "n", 0, "stop after this many requests (0: only -d bounds the run)")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load before the measured phase")
	fs.DurationVar(&c.Timeout, "timeout", time.Second, "deadline of each call")
	fs.Int64Var(&c.Keys, "keys", 10000, "distinct identifiers in the keyspace")
	fs.Int64Var(&c.Offset, "offset", 0, "first identifier: values are prefix+offset .. prefix+offset+keys-1")
	fs.StringVar(&c.Pick, "pick", load.PickUniform, "how identifiers are drawn: uniform or seq (each one once, in order, then wrap)")
	fs.IntVar(&c.Descriptors, "descriptors", 1, "descriptors per request, each with its own identifier")
	fs.StringVar(&c.Domain, "domain", "bench", "request domain")
	fs.StringVar(&keys, "key", "fw", "descriptor entry key; a comma-separated list gives descriptor i the i-th key (cycling)")
	fs.StringVar(&c.ValuePrefix, "prefix", "user-", "prefix of every identifier value")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed of the uniform draws")
	fs.BoolVar(&c.json, "json", false, "print one JSON object instead of text")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, k := range strings.Split(keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.EntryKeys = append(c.EntryKeys, k)
		}
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.Callers < 1 && c.Rate == 0:
		return errors.New("-c must be at least 1")
	case c.Rate < 0:
		return errors.New("-rate must not be negative")
	case c.Conns < 1:
		return errors.New("-conns must be at least 1")
	case c.duration <= 0:
		return errors.New("-d must be positive: it bounds the run")
	case c.Requests < 0, c.warmup < 0, c.Offset < 0:
		return errors.New("-n, -warmup and -offset must not be negative")
	case c.Timeout <= 0:
		return errors.New("-timeout must be positive")
	case c.Keys < 1:
		return errors.New("-keys must be at least 1")
	case c.Pick != load.PickUniform && c.Pick != load.PickSeq:
		return fmt.Errorf("-pick %q is neither %s nor %s", c.Pick, load.PickUniform, load.PickSeq)
	case c.Descriptors < 1:
		return errors.New("-descriptors must be at least 1")
	case c.Domain == "":
		return errors.New("-domain must not be empty")
	case len(c.EntryKeys) == 0:
		return errors.New("-key must name at least one key")
	}
	return nil
}
