package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// floodReport is the flood's nth report: 10,000 buckets never named before.
func floodReport(n int) *rlqspb.RateLimitQuotaUsageReports {
	const per = 10_000
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "adm"}
	for i := n * per; i < (n+1)*per; i++ {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": "flood", "tenant": fmt.Sprintf("%08x-1111-4222-8333-%012x", i, i)}},
			NumRequestsAllowed: 1, TimeElapsed: durationpb.New(5 * time.Second)})
	}
	return r
}

// flood measures ShouldRateLimit's latency at rate calls a second for d,
// without and then with a stream naming new buckets back to back.
func (e *env) flood(ctx context.Context, w io.Writer, d time.Duration, rate float64) error {
	cc, err := e.fresh()
	if err != nil {
		return err
	}
	defer cc.Close()
	fmt.Fprintf(w, "#### RateLimitService beside an RLQS bucket flood (%.0f calls/s)\n\n| RLQS | calls | errors | p50 | p99 | max |\n| --- | --- | --- | --- | --- | --- |\n", rate)
	for _, attack := range []bool{false, true} {
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		if attack {
			s, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(fctx)
			if err != nil {
				cancel()
				return err
			}
			wg.Go(func() {
				for _, err := s.Recv(); err == nil; _, err = s.Recv() {
				}
			})
			wg.Go(func() {
				for n := 0; s.Send(floodReport(n)) == nil; n++ {
				}
			})
		}
		lat, errs := e.paced(ctx, rls.NewRateLimitServiceClient(cc), d, rate)
		cancel()
		wg.Wait()
		slices.Sort(lat)
		at := func(q float64) time.Duration {
			if len(lat) == 0 {
				return 0
			}
			return lat[min(len(lat)-1, int(q*float64(len(lat))))]
		}
		name := "none"
		if attack {
			name = "one stream naming new buckets"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %v | %v | %v |\n", name, len(lat), errs, at(0.5), at(0.99), at(1))
	}
	fmt.Fprintln(w)
	return nil
}

// paced calls ShouldRateLimit at rate a second for d, from workers that
// each call every 200ms, and returns the latencies and the errors.
func (e *env) paced(ctx context.Context, client rls.RateLimitServiceClient, d time.Duration, rate float64) ([]time.Duration, int) {
	workers := max(1, int(rate/5))
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			t := time.NewTicker(time.Duration(float64(time.Second) * float64(workers) / rate))
			defer t.Stop()
			req := &rls.RateLimitRequest{Domain: "adm", Descriptors: []*common.RateLimitDescriptor{{
				Entries: []*common.RateLimitDescriptor_Entry{{Key: "name", Value: "adm" + strconv.Itoa(i%admBuckets)}}}}}
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				start := time.Now()
				_, err := client.ShouldRateLimit(ctx, req)
				mu.Lock()
				if err != nil && ctx.Err() == nil {
					errs++
				} else if err == nil {
					lat = append(lat, time.Since(start))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, errs
}
