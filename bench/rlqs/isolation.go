package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/bench/benchproc"
)

// isolation is the isolation scenario's size: RLQS streams, each of one
// bucket reporting every period, over conns connections; RLS calls paced
// at rlsRate a second by other clients; rounds of (without, with).
type isolation struct {
	streams, conns int
	workers        int           // --rlqs-report-workers of the bound's phase
	nice           int           // the report streams' child's nice value; negative: in process
	warmup         time.Duration // from the streams' start to the measurement's
	// tunedEnv, if set, adds a phase with the bound and this environment
	// for the server (GOGC=off GOMEMLIMIT=3GiB).
	tunedEnv []string
	// side adds a phase with the streams on a second server process of
	// the same binary, rules and Redis: RLQS in a process of its own.
	side bool
	// process adds a phase with the server's own --rlqs-process: RLQS
	// served by its child at --rlqs-nice on --rlqs-addr.
	process bool
	period  time.Duration
	rlsRate float64
	rounds  int
}

// isolation measures other clients' RateLimitService latency (p50, p99,
// errors) alone, then beside iso.streams RLQS streams with no bound on
// report handling (--rlqs-report-workers -1), then with its default
// bound, in interleaved phases of d, --rounds times, with the reports
// shed and the machine's load average at each phase's end
// (docs/rlqs.md, "RLQS and RLS on one replica"). The server starts again
// for each phase, Redis emptied.
func (e *env) isolation(ctx context.Context, w io.Writer, d time.Duration, iso isolation) error {
	fmt.Fprintf(w, "#### RLS latency while %d RLQS streams report every %v\n\n", iso.streams, iso.period)
	fmt.Fprintf(w, "RLS: %.0f calls/s from other clients, one connection; %d rounds of %v alone, then beside the streams without and with the bound on report handling (`--rlqs-report-workers`, default one per CPU).\n\n",
		iso.rlsRate, iso.rounds, d)
	fmt.Fprintln(w, "| round | RLQS streams | report workers | RLS calls | p50 | p99 | max | errors | reports received/s | RLQS store errors | reports shed | server GCs | loadavg |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	bound := strconv.Itoa(iso.workers)
	phases := []phase{{streams: false, workers: bound}, {streams: true, workers: "-1"}, {streams: true, workers: bound}}
	if len(iso.tunedEnv) > 0 {
		phases = append(phases, phase{streams: true, workers: bound, env: iso.tunedEnv})
	}
	if iso.side {
		phases = append(phases, phase{streams: true, workers: bound, side: true})
	}
	if iso.process {
		phases = append(phases, phase{streams: true, workers: bound, process: true})
	}
	for round := 1; round <= iso.rounds; round++ {
		for _, ph := range phases {
			row, err := e.runPhase(ctx, d, iso, ph)
			if err != nil {
				return err
			}
			n := 0
			if ph.streams {
				n = iso.streams
			}
			fmt.Fprintf(w, "| %d | %d | %s | %s |\n", round, n, ph.label(), row)
		}
	}
	fmt.Fprintln(w)
	return nil
}

// phase is one phase of a round of the isolation scenario.
type phase struct {
	streams bool
	workers string   // --rlqs-report-workers
	env     []string // the server's environment beyond the default
	side    bool     // the streams on a second server process
	process bool     // the streams on the server's --rlqs-process child
}

// label is the phase's "report workers" cell.
func (ph phase) label() string {
	if !ph.streams {
		return "none"
	}
	var l string
	switch ph.workers {
	case "-1":
		l = "no bound"
	case "0":
		l = "one per CPU"
	default:
		l = ph.workers
	}
	if len(ph.env) > 0 {
		l += ", " + strings.Join(ph.env, " ")
	}
	if ph.side {
		l += ", RLQS on a second process"
	}
	if ph.process {
		l += ", --rlqs-process"
	}
	return l
}

// runPhase starts the server again as ph asks, Redis emptied, and
// measures the phase (isolationPhase).
func (e *env) runPhase(ctx context.Context, d time.Duration, iso isolation, ph phase) (string, error) {
	if err := e.flush(); err != nil {
		return "", err
	}
	e.serverEnv = ph.env
	extra, rlqsAddr := []string{"--rlqs-report-workers", ph.workers}, ""
	if ph.process {
		var err error
		if rlqsAddr, err = e.freeAddr(); err != nil {
			return "", err
		}
		extra = append(extra, "--rlqs-addr", rlqsAddr, "--rlqs-process")
	}
	if err := e.restart(ctx, extra...); err != nil {
		return "", err
	}
	return e.isolationPhase(ctx, d, iso, ph, rlqsAddr)
}

// isolationPhase measures RLS latency for d, beside the reporting streams
// if ph.streams (sent to a second server process if ph.side, whose
// counters the row's RLQS cells are then; to rlqsAddr, the server's own
// RLQS listener, if not empty), and returns the row's measured cells.
func (e *env) isolationPhase(ctx context.Context, d time.Duration, iso isolation, ph phase, rlqsAddr string) (string, error) {
	cc, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer cc.Close()
	rlqsAdmin := e.adminAddr
	if rlqsAddr == "" {
		rlqsAddr = e.grpcAddr
	}
	if ph.side { // a second server of the same binary, rules and Redis
		sd, err := e.launch(ctx)
		if sd != nil {
			defer killProc(sd.cmd)
		}
		if err != nil {
			return "", err
		}
		rlqsAddr, rlqsAdmin = sd.grpcAddr, sd.adminAddr
	}
	stop := func() {}
	if ph.streams {
		if stop, err = e.startReporters(ctx, rlqsAddr, iso); err != nil {
			return "", err
		}
		// Every stream subscribes as it opens, all within a second or
		// two; the phase measures the streams' steady reporting, from
		// the end of their first period on.
		select {
		case <-ctx.Done():
			stop()
			return "", ctx.Err()
		case <-time.After(iso.warmup):
		}
	}
	before, err := e.phaseCounts(rlqsAdmin)
	if err != nil {
		stop()
		return "", err
	}
	start := time.Now()
	lat, failed := rlsLatency(ctx, cc, d, iso.rlsRate)
	after, err := e.phaseCounts(rlqsAdmin)
	took := time.Since(start)
	stop()
	if err != nil {
		return "", err
	}
	for i := range after {
		after[i] -= before[i]
	}
	storeErrs, shed, handled, gcs := after[0], after[1], after[2], after[3]
	// A report merged into a waiting one (shed) was received but not
	// handled on its own.
	received := (handled + shed) / took.Seconds()
	return fmt.Sprintf("%d | %s | %s | %s | %d | %.0f | %.0f | %.0f | %.0f | %s", len(lat),
		quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1), failed, received, storeErrs, shed, gcs, benchproc.LoadAverages()), nil
}

// phaseCounters are the server counters a phase reports, read by
// phaseCounts in this order: RLQS's, then the RLS server's collections.
var phaseCounters = []string{"fastlimit_rlqs_store_errors_total", "fastlimit_rlqs_shed_reports_total",
	"fastlimit_rlqs_reports_total", "go_gc_duration_seconds_count"}

// phaseCounts reads phaseCounters, RLQS's from the server whose admin
// listener is at rlqsAdmin.
func (e *env) phaseCounts(rlqsAdmin string) ([]float64, error) {
	out := make([]float64, len(phaseCounters))
	for i, name := range phaseCounters {
		admin := rlqsAdmin
		if strings.HasPrefix(name, "go_") {
			admin = e.adminAddr
		}
		v, err := metricAt(admin, name)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// openReporters opens iso.streams streams of one bucket each (domain
// bench) to the server at addr, which report every iso.period until the
// returned stop.
func openReporters(ctx context.Context, addr string, iso isolation) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var conns []*grpc.ClientConn
	stop := func() {
		cancel()
		wg.Wait()
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for range max(iso.conns, 1) {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			stop()
			return nil, err
		}
		conns = append(conns, c)
	}
	for i := range iso.streams {
		s, err := rlqspb.NewRateLimitQuotaServiceClient(conns[i%len(conns)]).StreamRateLimitQuotas(ctx)
		if err != nil {
			stop()
			return nil, fmt.Errorf("stream %d: %w", i, err)
		}
		wg.Add(2)
		go func() { // drain the answers
			defer wg.Done()
			for {
				if _, err := s.Recv(); err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			reportEvery(ctx, s, i, iso.period*time.Duration(i)/time.Duration(iso.streams), iso.period)
		}()
	}
	return stop, nil
}

// reportEvery sends stream i's subscription of its bucket at once, then after
// offset a report every period, until ctx ends.
func reportEvery(ctx context.Context, s rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, i int, offset, period time.Duration) {
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "bench", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": strconv.Itoa(i % fleetBuckets)}},
		NumRequestsAllowed: 1,
	}}}
	if s.Send(msg) != nil {
		return
	}
	u := msg.BucketQuotaUsages[0]
	u.NumRequestsAllowed, u.NumRequestsDenied, u.TimeElapsed = 40, 2, durationpb.New(period.Truncate(time.Second))
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if s.Send(msg) != nil {
			return
		}
		select {
		case <-ctx.Done():
			_ = s.CloseSend()
			return
		case <-t.C:
		}
	}
}

// rlsLatency paces RateLimitService calls at rate for d (paceRLS) and
// returns the answered calls' latencies, sorted, and the failed calls.
func rlsLatency(ctx context.Context, cc *grpc.ClientConn, d time.Duration, rate float64) ([]time.Duration, int) {
	var mu sync.Mutex
	var lat []time.Duration
	failed := 0
	paceRLS(ctx, cc, d, rate, func(_ *rls.RateLimitResponse, err error, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed++
			return
		}
		lat = append(lat, took)
	})
	slices.Sort(lat)
	return lat, failed
}

// quantile is the q-quantile of sorted durations, rounded for a table.
func quantile(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return sorted[i].Round(10 * time.Microsecond).String()
}
