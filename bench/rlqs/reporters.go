package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// The isolation scenario's report streams stand for 20,000 Envoys, which
// run on machines of their own. On one machine the streams' client costs
// CPU too, and in the process that measures RLS latency it delays the
// measuring goroutines themselves. So by default they run in a child
// process (this program's "reporters" command) at the lowest CPU priority
// (nice 19): the server, Redis and the RLS client get the CPU first, and
// the reports the server received a second are in the table, to show
// that the streams kept their pace.

// reportersCommand is the first argument that runs the report streams
// (runReporters) instead of scenarios.
const reportersCommand = "reporters"

// runReporters opens --streams streams to --addr, each reporting every
// --period, writes "ready" once every stream is open, and stops when its
// standard input closes.
func runReporters(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench/rlqs reporters", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "the server's gRPC address")
	iso := isolation{}
	fs.IntVar(&iso.streams, "streams", 20000, "streams")
	fs.IntVar(&iso.conns, "conns", 200, "connections the streams share")
	fs.DurationVar(&iso.period, "period", 5*time.Second, "each stream's report period")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	stop, err := openReporters(context.Background(), *addr, iso)
	if err != nil {
		fmt.Fprintln(stderr, "bench/rlqs reporters:", err)
		return 1
	}
	fmt.Fprintln(stdout, "ready")
	_, _ = io.Copy(io.Discard, stdin)
	stop()
	return 0
}

// startReporters runs iso's streams to the server at addr: in a child
// process at nice iso.nice, or in this one if iso.nice is negative.
func (e *env) startReporters(ctx context.Context, addr string, iso isolation) (func(), error) {
	if iso.nice < 0 {
		return openReporters(ctx, addr, iso)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nice", "-n", strconv.Itoa(iso.nice), exe, reportersCommand, "--addr", addr,
		"--streams", strconv.Itoa(iso.streams), "--conns", strconv.Itoa(iso.conns), "--period", iso.period.String())
	cmd.Env = append(os.Environ(), reportersEnv+"=1")
	cmd.Stderr = e.log
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the reporters: %w", err)
	}
	stop := func() {
		_ = in.Close()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		stop()
		return nil, errors.Join(errors.New("the reporters did not start"), err)
	}
	return stop, nil
}

// reportersEnv set to 1 tells a test binary started as the reporters'
// child to run them (TestMain).
const reportersEnv = "BENCH_RLQS_REPORTERS"
