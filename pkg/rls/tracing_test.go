package rls

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fastlimit/fastlimit/internal/observe/tracing"
)

// tracedService is a service on the memory store, traced into an
// in-memory exporter, with the rules of benchEdgeRules.
func tracedService(t *testing.T) (*tracing.Tracing, *Service, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(1))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.NewWith(tp, "test")
	return tr, edgeService(t, tr, Options{Spans: tracing.Spans{}}), exp
}

func TestTracingSpans(t *testing.T) {
	const (
		traceID  = "4bf92f3577b34e27a1b2c3d4e5f60718"
		parentID = "00f067aa0ba902b7"
		b3Trace  = "80f198ee56343ba864fe8b2a57d3eff7"
		b3Parent = "e457b5a2e4d86bd1"
	)
	for _, tc := range []struct {
		name       string
		md         []string // metadata pairs
		method     string
		wantSpans  bool
		wantTrace  string // "" for a new trace
		wantParent string
	}{
		{name: "W3C traceparent", md: []string{"traceparent", "00-" + traceID + "-" + parentID + "-01"},
			wantSpans: true, wantTrace: traceID, wantParent: parentID},
		{name: "B3 single header", md: []string{"b3", b3Trace + "-" + b3Parent + "-1"},
			wantSpans: true, wantTrace: b3Trace, wantParent: b3Parent},
		{name: "B3 multiple headers", md: []string{"X-B3-TraceId", b3Trace, "X-B3-SpanId", b3Parent, "X-B3-Sampled", "1"},
			wantSpans: true, wantTrace: b3Trace, wantParent: b3Parent},
		{name: "B3 64-bit trace id", md: []string{"x-b3-traceid", "a57d3eff7e457b5a", "x-b3-spanid", b3Parent, "x-b3-sampled", "1"},
			wantSpans: true, wantTrace: "0000000000000000a57d3eff7e457b5a", wantParent: b3Parent},
		{name: "W3C wins over B3", md: []string{"traceparent", "00-" + traceID + "-" + parentID + "-01", "b3", b3Trace + "-" + b3Parent + "-1"},
			wantSpans: true, wantTrace: traceID, wantParent: parentID},
		{name: "caller did not sample", md: []string{"traceparent", "00-" + traceID + "-" + parentID + "-00"}},
		{name: "B3 not sampled", md: []string{"b3", b3Trace + "-" + b3Parent + "-0"}},
		{name: "no trace context: a new trace", wantSpans: true},
		{name: "health checks are not traced", method: "/grpc.health.v1.Health/Check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, s, exp := tracedService(t)
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tc.md...))
			method := tc.method
			if method == "" {
				method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
			}
			req := benchRequests(3)[7]
			intercept := tr.UnaryInterceptor(rlspb.RateLimitService_ShouldRateLimit_FullMethodName)
			resp, err := intercept(ctx, req, &grpc.UnaryServerInfo{FullMethod: method},
				func(ctx context.Context, req any) (any, error) {
					return s.ShouldRateLimit(ctx, req.(*rlspb.RateLimitRequest))
				})
			if err != nil || resp == nil {
				t.Fatalf("call: %v, %v", resp, err)
			}
			spans := exp.GetSpans()
			if !tc.wantSpans {
				if len(spans) != 0 {
					t.Fatalf("%d spans, want none", len(spans))
				}
				return
			}
			if len(spans) != 2 {
				t.Fatalf("%d spans, want 2 (server, store): %v", len(spans), spans)
			}
			storeSpan, server := spans[0], spans[1] // ended first: the child
			if server.Name != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || server.SpanKind != trace.SpanKindServer {
				t.Errorf("server span %q kind %v", server.Name, server.SpanKind)
			}
			if tc.wantTrace != "" {
				if got := server.SpanContext.TraceID().String(); got != tc.wantTrace {
					t.Errorf("trace id %s, want %s", got, tc.wantTrace)
				}
				if got := server.Parent.SpanID().String(); got != tc.wantParent || !server.Parent.IsRemote() {
					t.Errorf("parent %s (remote %v), want remote %s", got, server.Parent.IsRemote(), tc.wantParent)
				}
			} else if server.Parent.IsValid() {
				t.Errorf("parent %v, want none", server.Parent)
			}
			if storeSpan.Name != "store.take" || storeSpan.Parent.SpanID() != server.SpanContext.SpanID() ||
				storeSpan.SpanContext.TraceID() != server.SpanContext.TraceID() {
				t.Errorf("store span %q parent %v, want store.take under %v", storeSpan.Name, storeSpan.Parent, server.SpanContext)
			}
			wantAttrs(t, server.Attributes, map[string]string{
				"ratelimit.domain": "edge", "ratelimit.descriptors": "3", "ratelimit.overall_code": "OK",
				"rpc.system": "grpc", "rpc.grpc.status_code": "0",
			})
			wantAttrs(t, storeSpan.Attributes, map[string]string{
				"ratelimit.store": "memory", "ratelimit.keys": "3", "ratelimit.denied": "0",
			})
			for _, sp := range spans {
				for _, kv := range sp.Attributes {
					for _, secret := range []string{"key-7", "10.0.0.7", "free", "global"} {
						if strings.Contains(kv.Value.Emit(), secret) {
							t.Errorf("span %s attribute %s=%s carries descriptor value %q", sp.Name, kv.Key, kv.Value.Emit(), secret)
						}
					}
				}
			}
		})
	}
}

func wantAttrs(t *testing.T, got []attribute.KeyValue, want map[string]string) {
	t.Helper()
	have := map[string]string{}
	for _, kv := range got {
		have[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range want {
		if have[k] != v {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, have[k], v, have)
		}
	}
}

// TestTracingJSON traces POST /json with the caller's traceparent.
func TestTracingJSON(t *testing.T) {
	tr, s, exp := tracedService(t)
	h := tr.HTTP("POST /json", s.JSON())
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"global"}]}]}`
	r := httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body))
	r.Header.Set("traceparent", "00-4bf92f3577b34e27a1b2c3d4e5f60718-00f067aa0ba902b7-01")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[1].Name != "POST /json" || spans[0].Parent.SpanID() != spans[1].SpanContext.SpanID() {
		t.Fatalf("spans %v, want store.take under POST /json", spans)
	}
	if got := spans[1].SpanContext.TraceID().String(); got != "4bf92f3577b34e27a1b2c3d4e5f60718" {
		t.Errorf("trace id %s", got)
	}
	wantAttrs(t, spans[1].Attributes, map[string]string{"http.response.status_code": "200"})
}
