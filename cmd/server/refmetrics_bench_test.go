package main

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastlimit/fastlimit/pkg/statsmap"
)

// BenchmarkShouldRateLimitRefStats is BenchmarkShouldRateLimit's
// descriptors=3/no-timeout with envoyproxy/ratelimit's stats counted
// beside FastLimit's (USE_PROMETHEUS=true): the extra cost of a decision
// of rules whose stat keys do not depend on the request.
func BenchmarkShouldRateLimitRefStats(b *testing.B) {
	s := benchService(b, 0, headersOff)
	reg := prometheus.NewRegistry()
	rs, err := newRefStats(s.limiter, 0.8, defaultMaxDynamicKeys, reg)
	if err != nil {
		b.Fatal(err)
	}
	if rs.prom, err = newRefCollector(rs.store, statsmap.Default(), reg); err != nil {
		b.Fatal(err)
	}
	s.obs = observers{s.obs, rs}
	reqs := benchRequests(3)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.ShouldRateLimit(ctx, reqs[i%benchClients]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
