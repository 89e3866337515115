package rls

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/observe/refstats"
)

// BenchmarkShouldRateLimitRefStats is BenchmarkShouldRateLimit's
// descriptors=3/no-timeout with envoyproxy/ratelimit's stats counted
// beside FastLimit's (USE_PROMETHEUS=true): the extra cost of a decision
// of rules whose stat keys do not depend on the request.
func BenchmarkShouldRateLimitRefStats(b *testing.B) {
	s := benchService(b, 0, HeadersOff)
	rep, err := refstats.New(refstats.Options{Prometheus: true, PrometheusPath: "/metrics", NearLimitRatio: 0.8},
		s.limiter, prometheus.NewRegistry(), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	s.obs = Observers{s.obs, rep.Stats()}
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
