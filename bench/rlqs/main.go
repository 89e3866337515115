// Command rlqs measures FastLimit's Rate Limit Quota Service: it
// builds ./cmd/server (run it from the repository root), or takes the
// binary --server-bin names (to compare two builds in alternate runs),
// starts a redis-server and the server on free
// loopback ports, drives them, reads both processes' CPU time (the
// server's from /proc, Linux only; Redis' from INFO) and prints markdown
// for BENCHMARKS.md. Everything it starts stops when it ends.
//
//	go run ./bench/rlqs                 # every scenario, about 3 minutes
//	go run ./bench/rlqs --scenario reports --duration 10s
//	go run ./bench/rlqs --scenario isolation  # about 5 minutes
//
// Scenarios:
//
//	reports  100 streams of 1,000 buckets each send reports back to back:
//	         bucket reports handled per second of server CPU (per core),
//	         and Redis CPU per bucket report.
//	cadence  the same 100 x 1,000 at Envoy's real period (5s): what such a
//	         fleet costs the server and Redis.
//	admitted 100 simulated Envoys (internal/testing/envoysim) of 10 buckets each,
//	         5,000 requests a second admitted in all (--admitted), through the quota
//	         service; then the same admitted rate through RateLimitService
//	         (ShouldRateLimit per request, paced): server + Redis CPU per
//	         admitted request of each.
//	isolation other clients' RateLimitService latency (p50, p99, max,
//	         errors) at --rls-rate calls a second, alone, then beside
//	         --streams RLQS streams of one bucket reporting every 5s
//	         (over --conns connections) with no bound on report handling
//	         (--rlqs-report-workers -1), then with its default bound,
//	         --rounds times interleaved, with the reports shed and the
//	         load average after each phase. Not in the default list.
//	flood    ShouldRateLimit paced at --admitted a second, its p50/p99/max
//	         latency and errors, alone and while one RLQS stream names new
//	         buckets, 10,000 a report, back to back (issue 29's attack); not
//	         in the default list.
package main

import (
	"context"
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
	if len(os.Args) > 1 && os.Args[1] == reportersCommand {
		os.Exit(runReporters(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	scenarios []string
	duration  time.Duration
	admitted  float64
	isolation isolation
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench/rlqs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "reports,cadence,admitted", "scenarios to run, comma-separated")
	duration := fs.Duration("duration", 30*time.Second, "measured time of each scenario")
	admitted := fs.Float64("admitted", 5000, "admitted: requests a second admitted through each service")
	iso := isolation{period: 5 * time.Second}
	fs.IntVar(&iso.streams, "streams", 20000, "isolation: RLQS streams")
	fs.IntVar(&iso.conns, "conns", 200, "isolation: connections the streams share")
	fs.Float64Var(&iso.rlsRate, "rls-rate", 1000, "isolation: RateLimitService calls a second")
	fs.IntVar(&iso.rounds, "rounds", 3, "isolation: rounds of (alone, beside the streams without, then with the bound)")
	fs.IntVar(&iso.nice, "reporters-nice", 19, "isolation: the report streams run in a child process at this nice value (negative: in this process)")
	fs.DurationVar(&iso.warmup, "warmup", 6*time.Second, "isolation: time from the streams' start (each subscribes at once) to the measurement's")
	fs.IntVar(&iso.workers, "report-workers", 0, "isolation: the server's --rlqs-report-workers of the bound's phase (0: its default, one per CPU)")
	fs.BoolVar(&iso.process, "process-phase", false, "isolation: a last phase with the server's --rlqs-process (RLQS from its child at --rlqs-nice, on --rlqs-addr), RLS calls on the parent")
	fs.BoolVar(&iso.side, "side-phase", false, "isolation: a last phase with the streams on a second server process (same binary, rules and Redis), RLS calls on the first")
	serverBin := fs.String("server-bin", "", "the server binary to measure, built beforehand (to compare builds in alternate runs); empty: build ./cmd/server")
	tuned := fs.String("tuned-env", "", "isolation: if set, a fourth phase with the bound and this space-separated environment for the server, e.g. \"GOGC=off GOMEMLIMIT=3GiB\"")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	iso.tunedEnv = strings.Fields(*tuned)
	o := options{scenarios: strings.Split(*scenario, ","), duration: *duration, admitted: *admitted, isolation: iso}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env, err := setup(ctx, stderr, *serverBin)
	if err != nil {
		fmt.Fprintln(stderr, "bench/rlqs:", err)
		return 1
	}
	defer env.close()
	fmt.Fprintf(stdout, "### Rate Limit Quota Service (`go run ./bench/rlqs`, %s)\n\n", time.Now().UTC().Format("2006-01-02 15:04"))
	fmt.Fprintf(stdout, "%s; each scenario measured for %v.\n\n", machine(), o.duration)
	for _, s := range o.scenarios {
		var err error
		switch s {
		case "reports":
			err = env.reports(ctx, stdout, o.duration, 0)
		case "cadence":
			err = env.reports(ctx, stdout, o.duration, 5*time.Second)
		case "admitted":
			err = env.admitted(ctx, stdout, o.duration, o.admitted)
		case "isolation":
			err = env.isolation(ctx, stdout, o.duration, o.isolation)
		case "flood":
			err = env.flood(ctx, stdout, o.duration, o.admitted)
		default:
			err = fmt.Errorf("unknown scenario %q", s)
		}
		if err != nil {
			fmt.Fprintln(stderr, "bench/rlqs:", s+":", err)
			return 1
		}
	}
	return 0
}
