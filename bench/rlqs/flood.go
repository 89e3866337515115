package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
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
		lat, errs := rlsLatency(ctx, cc, d, rate)
		cancel()
		wg.Wait()
		name := "none"
		if attack {
			name = "one stream naming new buckets"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s |\n", name, len(lat), errs, quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1))
	}
	fmt.Fprintln(w)
	return nil
}
