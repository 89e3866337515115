package rls

import (
	"context"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fastlimit/fastlimit/internal/observe/tracing"
)

// BenchmarkShouldRateLimitTraced is BenchmarkShouldRateLimit's
// descriptors=3/no-timeout with tracing on, through the interceptor:
// sampled is a caller's traceparent with the sampled flag (a server span
// and a store span, batched to an exporter that drops them); unsampled
// is the same without the flag (context extracted, no span recorded).
// With tracing off nothing of this is installed: compare with
// BenchmarkShouldRateLimit, whose code path is the untraced one.
func BenchmarkShouldRateLimitTraced(b *testing.B) {
	for _, tc := range []struct{ name, flags string }{{"sampled", "01"}, {"unsampled", "00"}} {
		b.Run("descriptors=3/"+tc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(1))))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			tr := tracing.NewWith(tp, "bench")
			s := edgeService(b, tr, Options{Spans: tracing.Spans{}})
			reqs := benchRequests(3)
			ctx := metadata.NewIncomingContext(context.Background(),
				metadata.Pairs("traceparent", "00-4bf92f3577b34e27a1b2c3d4e5f60718-00f067aa0ba902b7-"+tc.flags))
			info := &grpc.UnaryServerInfo{FullMethod: rlspb.RateLimitService_ShouldRateLimit_FullMethodName}
			handler := func(ctx context.Context, req any) (any, error) {
				return s.ShouldRateLimit(ctx, req.(*rlspb.RateLimitRequest))
			}
			intercept := tr.UnaryInterceptor(rlspb.RateLimitService_ShouldRateLimit_FullMethodName)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := intercept(ctx, reqs[i%benchClients], info, handler); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
