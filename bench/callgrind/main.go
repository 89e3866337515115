// Command callgrind counts the instructions a redis-server spends on
// rate-limit decisions, call shape by call shape, under valgrind's
// callgrind: counts, not times, the same for the same input whatever else
// the machine is doing.
//
// A row's calls are the ones pkg/store sends for it (Takes of n ops, one
// at a time, recorded on a redis-server of its own), or the plain script's
// and the reference's commands. They are replayed into a redis-server
// under callgrind through redis-cli --pipe, and so is everything but the
// measured calls (the scripts' loading; for keys that exist, a first pass
// of the same calls): the difference is the measured calls' cost.
//
//	go run ./bench/callgrind                          # every shape, a markdown table
//	go run ./bench/callgrind -ops 1 -algs fixed -keys new
//	go run ./bench/callgrind -memory                  # Redis memory per identifier
//
// With -memory it measures Redis memory instead (no valgrind): -ids
// identifiers a row, each hit -hits times in one window, through pkg/store
// for each algorithm and as the reference writes them; used_memory's
// growth per identifier, MEMORY USAGE per key, and a fixed window's key by
// part against the reference's.
//
// Needs redis-server, redis-cli, valgrind (Debian:
// redis-server, redis-tools, valgrind).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, "callgrind:", err)
		os.Exit(2)
	}
	if err := measure(o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "callgrind:", err)
		os.Exit(1)
	}
}

// options are the command line's settings.
type options struct {
	ops    []int
	algs   []string
	keys   []string // "new", "existing"
	ids    int
	calls  int
	refs   bool
	memory bool   // -memory: measure Redis memory per identifier
	hits   []int  // -hits: of each identifier, in -memory
	keep   string // directory for the profiles, "" for none
	args   []string
	server string // redis-server
	cli    string // redis-cli
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("callgrind", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ops := fs.String("ops", "1,4,25", "decisions a call, comma-separated")
	algs := fs.String("algs", "fixed,sliding,bucket", "algorithms: fixed, sliding, bucket")
	keys := fs.String("keys", "new,existing", "state of the keys the calls hit: new (nothing stored) or existing (a first pass stored them)")
	fs.IntVar(&o.ids, "ids", 100000, "identifiers the keys are drawn from (1: every decision on one hot key)")
	fs.IntVar(&o.calls, "calls", 200, "measured calls a row")
	fs.BoolVar(&o.refs, "refs", true, "add the rows of the plain script and of the reference's INCRBY+EXPIRE")
	fs.BoolVar(&o.memory, "memory", false, "measure Redis memory per identifier (used_memory, MEMORY USAGE) instead of instructions")
	hits := fs.String("hits", "1,10", "with -memory: hits of each identifier in its window, comma-separated (10 and more: a fixed window's count in thousandths passes Redis' shared integers)")
	fs.StringVar(&o.keep, "keep", "", "directory to keep each row's callgrind profiles in, NAME.callgrind and its setup's NAME.base.callgrind (for callgrind_annotate: the row's calls are the difference)")
	fs.StringVar(&o.server, "redis-server", "redis-server", "redis-server binary")
	fs.StringVar(&o.cli, "redis-cli", "redis-cli", "redis-cli binary")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.ops, err = ints(*ops); err != nil {
		return nil, err
	}
	if o.hits, err = ints(*hits); err != nil {
		return nil, err
	}
	o.algs, o.keys = list(*algs), list(*keys)
	for _, a := range o.algs {
		if _, ok := algorithms[a]; !ok {
			return nil, fmt.Errorf("-algs: unknown algorithm %q", a)
		}
	}
	for _, k := range o.keys {
		if k != "new" && k != "existing" {
			return nil, fmt.Errorf("-keys: %q is neither new nor existing", k)
		}
	}
	if o.ids < 1 || o.calls < 1 {
		return nil, errors.New("-ids and -calls must be at least 1")
	}
	if o.keep != "" {
		if err := os.MkdirAll(o.keep, 0o755); err != nil {
			return nil, fmt.Errorf("-keep: %w", err)
		}
	}
	return o, nil
}

func list(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range list(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 255 {
			return nil, fmt.Errorf("-ops: %q is not a number of decisions from 1 to 255", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// quoteArgs joins args, each after a space.
func quoteArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(" " + a)
	}
	return b.String()
}

// thousands prints n with comma separators, "—" for a negative n (not
// measured).
func thousands(n int64) string {
	if n < 0 {
		return "—"
	}
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
