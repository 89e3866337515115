package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
)

const (
	fleetStreams = 100
	fleetBuckets = 1000
)

// report is one stream's report of every bucket of domain bench.
func report() *rlqspb.RateLimitQuotaUsageReports {
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "bench"}
	for i := range fleetBuckets {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": strconv.Itoa(i)}},
			NumRequestsAllowed: 40, NumRequestsDenied: 2, TimeElapsed: durationpb.New(5 * time.Second),
		})
	}
	return r
}

// backToBack is how many of the streams have a report in flight at once
// when they report back to back: enough to keep the server busy, few
// enough that Redis answers every exchange within the store timeout.
const backToBack = 4

// bucketRate is the demand each report states for each bucket: requests
// per second of elapsed time, as an Envoy's deltas would, so that the
// measured demand stays put however often a stream reports.
const bucketRate = 8.4

// fleetStream is one stream of the report scenarios. A report counts as
// answered once every bucket it named has had an action since it was
// sent (the answer names them all; pushes of other streams' reports name
// some on the way).
type fleetStream struct {
	s     rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	msg   *rlqspb.RateLimitQuotaUsageReports
	resps chan *rlqspb.RateLimitQuotaResponse
	last  time.Time
	carry float64
}

func openFleetStream(ctx context.Context, cc *grpc.ClientConn) (*fleetStream, error) {
	s, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
	if err != nil {
		return nil, err
	}
	f := &fleetStream{s: s, msg: report(), resps: make(chan *rlqspb.RateLimitQuotaResponse, 64), last: time.Now()}
	go func() {
		defer close(f.resps)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			f.resps <- r
		}
	}()
	return f, f.report()
}

// report sends a report of the requests since the last and waits until
// every bucket has had an action since.
func (f *fleetStream) report() error {
	now := time.Now()
	f.carry += bucketRate * now.Sub(f.last).Seconds()
	f.last = now
	n := uint64(f.carry)
	f.carry -= float64(n)
	for _, u := range f.msg.BucketQuotaUsages {
		u.NumRequestsAllowed = n
		u.TimeElapsed = durationpb.New(time.Duration(float64(n) / bucketRate * float64(time.Second)).Truncate(time.Second))
	}
	for drained := false; !drained; { // what came before this report
		select {
		case _, ok := <-f.resps:
			if !ok {
				return fmt.Errorf("stream ended")
			}
		default:
			drained = true
		}
	}
	if err := f.s.Send(f.msg); err != nil {
		return err
	}
	var seen [fleetBuckets]bool
	for left := fleetBuckets; left > 0; {
		r, ok := <-f.resps
		if !ok {
			return fmt.Errorf("stream ended")
		}
		for _, a := range r.GetBucketAction() {
			if i, err := strconv.Atoi(a.GetBucketId().GetBucket()["name"]); err == nil && i < fleetBuckets && !seen[i] {
				seen[i] = true
				left--
			}
		}
	}
	return nil
}

// fresh empties Redis and dials the server for a scenario.
func (e *env) fresh() (*grpc.ClientConn, error) {
	if err := e.flush(); err != nil {
		return nil, err
	}
	return grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// reports runs 100 streams of 1,000 buckets: back to back (period 0,
// backToBack reports in flight), or each reporting every period, the
// streams' ticks spread over it. The streams subscribe first, then settle
// for 10s before the measured time.
func (e *env) reports(ctx context.Context, w io.Writer, d, period time.Duration) error {
	cc, err := e.fresh()
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]*fleetStream, fleetStreams)
	for i := range streams {
		if streams[i], err = openFleetStream(ctx, cc); err != nil {
			return err
		}
	}
	drive := func(d time.Duration, handled *atomic.Int64) {
		start := time.Now()
		end := start.Add(d)
		inFlight := make(chan struct{}, backToBack)
		var wg sync.WaitGroup
		for i, f := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := start.Add(period * time.Duration(i) / fleetStreams)
				for time.Now().Before(end) {
					if period > 0 {
						time.Sleep(time.Until(next))
						next = next.Add(period)
					} else {
						inFlight <- struct{}{}
					}
					err := f.report()
					if period == 0 {
						<-inFlight
					}
					if err != nil {
						return
					}
					handled.Add(fleetBuckets)
				}
			}()
		}
		wg.Wait()
	}
	var settle, handled atomic.Int64
	drive(10*time.Second, &settle)
	before, err := e.cpu()
	if err != nil {
		return err
	}
	errs0, err := e.storeErrors()
	if err != nil {
		return err
	}
	start := time.Now()
	drive(d, &handled)
	took := time.Since(start)
	after, err := e.cpu()
	if err != nil {
		return err
	}
	used := after.sub(before)
	n := float64(handled.Load())
	errs, err := e.storeErrors()
	if err != nil {
		return err
	}
	title := "back to back"
	if period > 0 {
		title = "every " + period.String()
	}
	fmt.Fprintf(w, "**%d Envoys x %d buckets, reports %s**\n\n", fleetStreams, fleetBuckets, title)
	fmt.Fprintln(w, "| bucket reports/s | server CPU | bucket reports per server CPU-second | Redis CPU | Redis CPU per bucket report | failed exchanges |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| %.0f | %.0f%% | %.0f | %.0f%% | %.2f µs | %.0f |\n\n", n/took.Seconds(),
		100*used.server.Seconds()/took.Seconds(), n/used.server.Seconds(),
		100*used.redis.Seconds()/took.Seconds(), used.redis.Seconds()/n*1e6, errs-errs0)
	return nil
}

// The admitted scenario: admEnvoys Envoys of admBuckets buckets each.
const (
	admEnvoys  = 100
	admBuckets = 10
)

// admitted measures server + Redis CPU per admitted request: through the
// quota service (simulated Envoys decide locally, report every 5s), then
// through RateLimitService (a call per request), at the same rate.
func (e *env) admitted(ctx context.Context, w io.Writer, d time.Duration, admittedRate float64) error {
	cc, err := e.fresh()
	if err != nil {
		return err
	}
	defer cc.Close()
	// RateLimitService first: the quota service then runs at the rate the
	// paced calls reached, which a busy machine may keep under the target.
	rl, rn, err := e.rlsLoad(ctx, cc, d, admittedRate)
	if err != nil {
		return err
	}
	admittedRate = rn / d.Seconds()
	if err := e.flush(); err != nil {
		return err
	}
	quota, qn, err := e.quotaLoad(ctx, cc, d, admittedRate/(admEnvoys*admBuckets))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "**Per admitted request, %d Envoys x %d buckets, about %.0f requests/s admitted**\n\n", admEnvoys, admBuckets, admittedRate)
	fmt.Fprintln(w, "| service | admitted/s | server CPU | Redis CPU | server + Redis CPU per admitted request |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	for _, r := range []struct {
		name string
		c    cpu
		n    float64
	}{{"RateLimitQuotaService (Envoy decides locally)", quota, qn}, {"RateLimitService (a call per request)", rl, rn}} {
		fmt.Fprintf(w, "| %s | %.0f | %.0f%% | %.0f%% | %.2f µs |\n", r.name, r.n/d.Seconds(),
			100*r.c.server.Seconds()/d.Seconds(), 100*r.c.redis.Seconds()/d.Seconds(),
			(r.c.server+r.c.redis).Seconds()/r.n*1e6)
	}
	fmt.Fprintln(w)
	return nil
}

// quotaLoad runs simulated Envoys on the wall clock: 15s to settle, then
// d measured. It returns the CPU used and the requests admitted in d.
func (e *env) quotaLoad(ctx context.Context, cc *grpc.ClientConn, d time.Duration, admPerBucket float64) (cpu, float64, error) {
	var fleet envoysim.Fleet
	fleet.Step = 20 * time.Millisecond
	var ts []*envoysim.Traffic
	for range admEnvoys {
		env, err := envoysim.New(envoysim.Config{Domain: "adm"}, envoysim.WallClock{}, envoysim.GRPCDialer(cc))
		if err != nil {
			return cpu{}, 0, err
		}
		defer env.Close()
		fleet.Add(env)
		for b := range admBuckets {
			ts = append(ts, fleet.Send(env, map[string]string{"name": "adm" + strconv.Itoa(b)}, admPerBucket))
		}
	}
	fleet.RunRealtime(ctx, 15*time.Second)
	count := func() float64 {
		n := 0.0
		for _, t := range ts {
			n += float64(t.Envoy.Counts(t.Bucket).Allowed)
		}
		return n
	}
	before, err := e.cpu()
	if err != nil {
		return cpu{}, 0, err
	}
	n0 := count()
	fleet.RunRealtime(ctx, d)
	after, err := e.cpu()
	if err != nil {
		return cpu{}, 0, err
	}
	if v := fleet.Violations(); v.Total() != 0 {
		return cpu{}, 0, fmt.Errorf("protocol violations: %v", v)
	}
	return after.sub(before), count() - n0, nil
}

// rlsLoad paces ShouldRateLimit calls at admittedRate for d, one
// descriptor each over the same buckets.
func (e *env) rlsLoad(ctx context.Context, cc *grpc.ClientConn, d time.Duration, admittedRate float64) (cpu, float64, error) {
	var ok atomic.Int64
	before, err := e.cpu()
	if err != nil {
		return cpu{}, 0, err
	}
	paceRLS(ctx, cc, d, admittedRate, func(resp *rls.RateLimitResponse, err error, _ time.Duration) {
		if err == nil && resp.GetOverallCode() == rls.RateLimitResponse_OK {
			ok.Add(1)
		}
	})
	after, err := e.cpu()
	if err != nil {
		return cpu{}, 0, err
	}
	return after.sub(before), float64(ok.Load()), nil
}

// rlsCallTimeout is the deadline of each RLS call paceRLS makes: one
// that takes longer counts as an error.
const rlsCallTimeout = 10 * time.Second

// paceRLS paces ShouldRateLimit calls of domain adm at rate for d and
// calls each, from many goroutines, with every call's answer and
// latency; a call in flight at d's end runs on to its answer.
func paceRLS(ctx context.Context, cc *grpc.ClientConn, d time.Duration, rate float64,
	each func(resp *rls.RateLimitResponse, err error, took time.Duration)) {
	client := rls.NewRateLimitServiceClient(cc)
	// Each worker calls every 200ms at most, so that a slow call delays
	// its own next one only; worker i starts i/workers of an interval
	// late, so that the calls come evenly spread, not all workers' at
	// once every interval.
	workers := max(int(rate/5), 1)
	interval := time.Duration(float64(time.Second) * float64(workers) / rate)
	// The phase's end stops new calls; a call in flight then runs on to
	// its answer, under a deadline of its own: cut by the phase's end,
	// it failed with DeadlineExceeded (the server's copy of the deadline
	// fires first), 1-4 RLS errors a phase alone on a quiet server.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval * time.Duration(i) / time.Duration(workers)):
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			req := &rls.RateLimitRequest{Domain: "adm", Descriptors: []*common.RateLimitDescriptor{{
				Entries: []*common.RateLimitDescriptor_Entry{{Key: "name", Value: "adm" + strconv.Itoa(i%admBuckets)}},
			}}}
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				start := time.Now()
				call, done := context.WithTimeout(parent, rlsCallTimeout)
				resp, err := client.ShouldRateLimit(call, req)
				done()
				if parent.Err() == nil {
					each(resp, err, time.Since(start))
				}
			}
		}()
	}
	wg.Wait()
}
