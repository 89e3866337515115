package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// collector is an OTLP trace receiver, over gRPC or HTTP, that keeps
// every span it is sent with its resource's attributes.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	span     *tracepb.Span
	resource map[string]string
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, receivedSpan{span: sp, resource: res})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is OTLP/HTTP with protobuf bodies, as otlptracehttp sends.
func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, _ := c.Export(r.Context(), &req)
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) all() []receivedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]receivedSpan(nil), c.spans...)
}

// startCollector serves OTLP over protocol ("grpc" or "http") on a
// loopback port and returns its endpoint URL.
func startCollector(t *testing.T, protocol string) (*collector, string) {
	t.Helper()
	c := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	switch protocol {
	case "grpc":
		g := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(g, c)
		go func() { _ = g.Serve(lis) }()
		t.Cleanup(g.Stop)
	default:
		h := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = h.Serve(lis) }()
		t.Cleanup(func() { _ = h.Close() })
	}
	return c, "http://" + lis.Addr().String()
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		}
	}
	return m
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// caller is one traced request: the trace context Envoy sends.
type caller struct {
	traceID, spanID string
	md              metadata.MD
}

// TestTracing runs the binary with TRACING_ENABLED and the OTLP endpoint
// of a receiver in the test, over each exporter protocol, and sends
// decisions with W3C traceparent, B3 single and B3 multiple headers:
// each gives one server span in the caller's trace, child of the
// caller's span, with one child span of the store call; a caller that
// did not sample gives none.
func TestTracing(t *testing.T) {
	r := redistest.StartServer(t)
	for i, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			col, endpoint := startCollector(t, protocol)
			srv := start(t, launch{rules: files.Dir(t, map[string]string{"trace.yaml": traceRules}), noDial: true,
				flags: []string{"--redis-url", "redis://" + r.Addr + "/0"}, env: envMap(
					"TRACING_ENABLED=true",
					"TRACING_EXPORTER_PROTOCOL="+protocol,
					"TRACING_SERVICE_NAME=fastlimit-e2e",
					"TRACING_SERVICE_NAMESPACE=e2e",
					"TRACING_SERVICE_INSTANCE_ID=pod-"+protocol,
					"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint,
					"OTEL_BSP_SCHEDULE_DELAY=100",
				)})
			conn, err := grpc.NewClient(srv.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rls.NewRateLimitServiceClient(conn)

			const n = 12
			callers := make([]caller, n)
			for j := range callers {
				c := caller{traceID: randomHex(t, 16), spanID: randomHex(t, 8)}
				switch j % 3 {
				case 0:
					c.md = metadata.Pairs("traceparent", "00-"+c.traceID+"-"+c.spanID+"-01")
				case 1:
					c.md = metadata.Pairs("b3", c.traceID+"-"+c.spanID+"-1")
				default:
					c.md = metadata.Pairs("x-b3-traceid", c.traceID, "x-b3-spanid", c.spanID, "x-b3-sampled", "1")
				}
				callers[j] = c
			}
			unsampled := caller{traceID: randomHex(t, 16), spanID: randomHex(t, 8)}
			unsampled.md = metadata.Pairs("traceparent", "00-"+unsampled.traceID+"-"+unsampled.spanID+"-00")
			// The unsampled call goes in the middle, in the batches of
			// sampled ones: had it made spans, they would arrive with them.
			calls := append(append(append([]caller(nil), callers[:n/2]...), unsampled), callers[n/2:]...)
			for j, c := range calls {
				ctx := metadata.NewOutgoingContext(ctxTimeout(t, 10*time.Second), c.md)
				user := fmt.Sprintf("trace-user-%d-%d", i, j)
				resp, err := client.ShouldRateLimit(ctx, domainRequest("trace", user, "user_id"))
				if err != nil || resp.GetOverallCode() != rls.RateLimitResponse_OK {
					t.Fatalf("call %d: %v, %v", j, resp.GetOverallCode(), err)
				}
			}

			byTrace := func() map[string][]receivedSpan {
				m := map[string][]receivedSpan{}
				for _, s := range col.all() {
					id := hex.EncodeToString(s.span.GetTraceId())
					m[id] = append(m[id], s)
				}
				return m
			}
			ok := wait.True(15*time.Second, func() bool {
				m := byTrace()
				for _, c := range callers {
					if len(m[c.traceID]) < 2 {
						return false
					}
				}
				return true
			})
			if !ok {
				t.Fatalf("the receiver did not get 2 spans for each of %d traces; got %d spans", n, len(col.all()))
			}
			m := byTrace()
			if got := m[unsampled.traceID]; len(got) != 0 {
				t.Errorf("caller that did not sample: %d spans, want none", len(got))
			}
			for j, c := range callers {
				spans := m[c.traceID]
				if len(spans) != 2 {
					t.Errorf("trace %d: %d spans, want 2", j, len(spans))
					continue
				}
				var server, storeSpan *tracepb.Span
				for _, s := range spans {
					if s.span.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
						server = s.span
						if s.resource["service.name"] != "fastlimit-e2e" || s.resource["service.namespace"] != "e2e" ||
							s.resource["service.instance.id"] != "pod-"+protocol {
							t.Errorf("trace %d: resource %v", j, s.resource)
						}
					} else {
						storeSpan = s.span
					}
				}
				if server == nil || storeSpan == nil {
					t.Errorf("trace %d: spans %v, want a server span and a store span", j, spans)
					continue
				}
				if server.GetName() != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
					t.Errorf("trace %d: server span %q", j, server.GetName())
				}
				if got := hex.EncodeToString(server.GetParentSpanId()); got != c.spanID {
					t.Errorf("trace %d: server span's parent %s, want the caller's %s", j, got, c.spanID)
				}
				if !bytes.Equal(storeSpan.GetParentSpanId(), server.GetSpanId()) || storeSpan.GetName() != "store.take" {
					t.Errorf("trace %d: %q's parent %x, want store.take under the server span %x",
						j, storeSpan.GetName(), storeSpan.GetParentSpanId(), server.GetSpanId())
				}
				sa := attrs(server.GetAttributes())
				if sa["ratelimit.domain"] != "trace" || sa["ratelimit.descriptors"] != "1" || sa["ratelimit.overall_code"] != "OK" {
					t.Errorf("trace %d: server span attributes %v", j, sa)
				}
				if st := attrs(storeSpan.GetAttributes()); st["ratelimit.store"] != "redis" || st["ratelimit.keys"] != "1" {
					t.Errorf("trace %d: store span attributes %v", j, st)
				}
				for _, sp := range []*tracepb.Span{server, storeSpan} {
					for k, v := range attrs(sp.GetAttributes()) {
						if strings.Contains(v, "trace-user-") {
							t.Errorf("trace %d: span %s attribute %s=%q carries a descriptor value", j, sp.GetName(), k, v)
						}
					}
				}
			}
		})
	}
}
