// Command loadgen drives a RateLimitService (FastLimit, or any server that
// speaks envoy.service.ratelimit.v3) over gRPC and reports decisions per
// second, OK/OVER_LIMIT counts, errors and latency percentiles.
//
// N callers share M connections round-robin; each request carries 1..n
// descriptors of one entry, whose values are drawn from a keyspace of K
// identifiers, uniformly or in sequence. A run lasts -d, or stops earlier
// after -n requests; every call is bounded by -timeout.
//
//	loadgen -addr 127.0.0.1:8081 -c 64 -conns 4 -d 10s -keys 10000 -domain bench -key fw
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
	rep, err := generate(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	if cfg.json {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	return 0
}

// Ways to draw identifiers.
const (
	pickUniform = "uniform" // independent uniform draws from the keyspace
	pickSeq     = "seq"     // offset, offset+1, ... wrapping at keys
)

// config is a run's settings.
type config struct {
	addr        string
	callers     int
	conns       int
	duration    time.Duration // measured phase; always bounds the run
	requests    int64         // 0: no count bound
	warmup      time.Duration
	timeout     time.Duration // per call
	keys        int64
	offset      int64
	pick        string
	descriptors int
	domain      string
	entryKeys   []string // descriptor i uses entryKeys[i % len]
	valuePrefix string
	seed        uint64
	json        bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var keys string
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "gRPC address of the rate-limit server")
	fs.IntVar(&c.callers, "c", 64, "concurrent callers, each with one request in flight")
	fs.IntVar(&c.conns, "conns", 4, "gRPC connections; callers are spread over them round-robin")
	fs.DurationVar(&c.duration, "d", 10*time.Second, "measured duration (always bounds the run)")
	fs.Int64Var(&c.requests, "n", 0, "stop after this many requests (0: only -d bounds the run)")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load before the measured phase")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "deadline of each call")
	fs.Int64Var(&c.keys, "keys", 10000, "distinct identifiers in the keyspace")
	fs.Int64Var(&c.offset, "offset", 0, "first identifier: values are prefix+offset .. prefix+offset+keys-1")
	fs.StringVar(&c.pick, "pick", pickUniform, "how identifiers are drawn: uniform or seq (each one once, in order, then wrap)")
	fs.IntVar(&c.descriptors, "descriptors", 1, "descriptors per request, each with its own identifier")
	fs.StringVar(&c.domain, "domain", "bench", "request domain")
	fs.StringVar(&keys, "key", "fw", "descriptor entry key; a comma-separated list gives descriptor i the i-th key (cycling)")
	fs.StringVar(&c.valuePrefix, "prefix", "user-", "prefix of every identifier value")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed of the uniform draws")
	fs.BoolVar(&c.json, "json", false, "print one JSON object instead of text")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, k := range strings.Split(keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.entryKeys = append(c.entryKeys, k)
		}
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.callers < 1:
		return errors.New("-c must be at least 1")
	case c.conns < 1:
		return errors.New("-conns must be at least 1")
	case c.duration <= 0:
		return errors.New("-d must be positive: it bounds the run")
	case c.requests < 0, c.warmup < 0, c.offset < 0:
		return errors.New("-n, -warmup and -offset must not be negative")
	case c.timeout <= 0:
		return errors.New("-timeout must be positive")
	case c.keys < 1:
		return errors.New("-keys must be at least 1")
	case c.pick != pickUniform && c.pick != pickSeq:
		return fmt.Errorf("-pick %q is neither %s nor %s", c.pick, pickUniform, pickSeq)
	case c.descriptors < 1:
		return errors.New("-descriptors must be at least 1")
	case c.domain == "":
		return errors.New("-domain must not be empty")
	case len(c.entryKeys) == 0:
		return errors.New("-key must name at least one key")
	}
	return nil
}
