package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// isolation is the isolation scenario's size: RLQS streams, each of one
// bucket reporting every period, over conns connections; RLS calls paced
// at rlsRate a second by other clients; rounds of (without, with).
type isolation struct {
	streams, conns int
	period         time.Duration
	rlsRate        float64
	rounds         int
}

// isolation measures other clients' RateLimitService latency (p50, p99,
// errors) while iso.streams RLQS streams report, against the same load
// without them, in interleaved phases of d, with the machine's load
// average at each phase's end (docs/operations.md, "RLQS and RLS").
func (e *env) isolation(ctx context.Context, w io.Writer, d time.Duration, iso isolation) error {
	cc, err := e.fresh()
	if err != nil {
		return err
	}
	defer cc.Close()
	fmt.Fprintf(w, "#### RLS latency while %d RLQS streams report every %v\n\n", iso.streams, iso.period)
	fmt.Fprintf(w, "RLS: %.0f calls/s from other clients, one connection; %d rounds of %v without, then with the streams.\n\n",
		iso.rlsRate, iso.rounds, d)
	fmt.Fprintln(w, "| round | RLQS streams | RLS calls | p50 | p99 | max | errors | RLQS store errors | loadavg |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for round := 1; round <= iso.rounds; round++ {
		for _, with := range []bool{false, true} {
			stop := func() {}
			if with {
				if stop, err = e.openReporters(ctx, iso); err != nil {
					return err
				}
			}
			errs0, err := e.storeErrors()
			if err != nil {
				stop()
				return err
			}
			lat, failed := rlsLatency(ctx, cc, d, iso.rlsRate)
			errs1, err := e.storeErrors()
			stop()
			if err != nil {
				return err
			}
			n := 0
			if with {
				n = iso.streams
			}
			fmt.Fprintf(w, "| %d | %d | %d | %s | %s | %s | %d | %.0f | %s |\n", round, n, len(lat),
				quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1), failed, errs1-errs0, loadavg())
		}
	}
	fmt.Fprintln(w)
	return nil
}

// openReporters opens iso.streams streams of one bucket each (domain
// bench), which report every iso.period until the returned stop.
func (e *env) openReporters(ctx context.Context, iso isolation) (func(), error) {
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
		c, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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

// rlsLatency paces ShouldRateLimit calls at rate for d over the adm
// domain and returns each answered call's latency, and the calls that
// failed.
func rlsLatency(ctx context.Context, cc *grpc.ClientConn, d time.Duration, rate float64) ([]time.Duration, int) {
	client := rls.NewRateLimitServiceClient(cc)
	workers := max(int(rate/50), 1) // each calls every 20ms at most
	interval := time.Duration(float64(time.Second) * float64(workers) / rate)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	failed := 0
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &rls.RateLimitRequest{Domain: "adm", Descriptors: []*common.RateLimitDescriptor{{
				Entries: []*common.RateLimitDescriptor_Entry{{Key: "name", Value: "adm" + strconv.Itoa(i%admBuckets)}},
			}}}
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				start := time.Now()
				cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
				_, err := client.ShouldRateLimit(cctx, req)
				ccancel()
				took := time.Since(start)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
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

// loadavg is the machine's 1-, 5- and 15-minute load averages ("" off Linux).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
