package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Environment twins of the tracing flags: the reference's variables.
const (
	envTracingProtocol = "TRACING_EXPORTER_PROTOCOL"
	envTracingRate     = "TRACING_SAMPLING_RATE"
)

// Span attributes. Descriptor values are never recorded: they may be
// personal data (addresses, user ids, API keys).
const (
	attrDomain      = attribute.Key("ratelimit.domain")
	attrDescriptors = attribute.Key("ratelimit.descriptors")
	attrCode        = attribute.Key("ratelimit.overall_code")
	attrStore       = attribute.Key("ratelimit.store")
	attrKeys        = attribute.Key("ratelimit.keys")
	attrDenied      = attribute.Key("ratelimit.denied")
	attrRPCSystem   = attribute.Key("rpc.system")
	attrRPCService  = attribute.Key("rpc.service")
	attrRPCMethod   = attribute.Key("rpc.method")
	attrGRPCStatus  = attribute.Key("rpc.grpc.status_code")
	attrHTTPStatus  = attribute.Key("http.response.status_code")
)

// traceOptions turn tracing on. The exporter's endpoint, headers, TLS
// and timeouts come from the SDK's own OTEL_EXPORTER_OTLP_* variables.
type traceOptions struct {
	enabled    bool
	service    string
	namespace  string
	instanceID string
	protocol   string
	rate       float64
}

func addTracingFlags(fs *flag.FlagSet, o *traceOptions) {
	fs.BoolVar(&o.enabled, "tracing-enabled", false,
		"export OpenTelemetry spans of every decision over OTLP (endpoint and the rest from OTEL_EXPORTER_OTLP_*); Envoy's W3C traceparent or B3 headers are continued")
	fs.StringVar(&o.service, "tracing-service-name", "RateLimit", "tracing: the resource's service.name")
	fs.StringVar(&o.namespace, "tracing-service-namespace", "", "tracing: the resource's service.namespace")
	fs.StringVar(&o.instanceID, "tracing-service-instance-id", "", "tracing: the resource's service.instance.id (empty: a random UUID)")
	fs.StringVar(&o.protocol, "tracing-exporter-protocol", "http", "tracing: OTLP over http (protobuf) or grpc")
	fs.Float64Var(&o.rate, "tracing-sampling-rate", 1,
		"tracing: share of traces sampled when the caller did not decide, 0 to 1; a caller's sampled flag is followed")
}

func (o traceOptions) validate() error {
	if !o.enabled {
		return nil
	}
	switch strings.ToLower(o.protocol) {
	case "http", "grpc":
	default:
		return fmt.Errorf("%s: %q is neither http nor grpc", envTracingProtocol, o.protocol)
	}
	if math.IsNaN(o.rate) || o.rate < 0 || o.rate > 1 {
		return fmt.Errorf("%s: %v is not between 0 and 1", envTracingRate, o.rate)
	}
	return nil
}

// tracing makes the spans of decisions and exports them. A nil *tracing
// is tracing off: nothing is installed and nothing is spent. newTracing
// starts nothing; Open starts the exporter; Shutdown flushes and stops it.
type tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	protocol string // http or grpc; empty: the provider exports already
	log      *zap.Logger
}

// newTracing returns nil when tracing is off.
func newTracing(o traceOptions, log *zap.Logger) (*tracing, error) {
	if !o.enabled {
		return nil, nil
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	res, err := newResource(context.Background(), o)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.rate))),
	)
	t := newTracingWith(tp)
	t.protocol, t.log = strings.ToLower(o.protocol), log
	return t, nil
}

// newTracingWith traces on tp, whose span processors are set.
func newTracingWith(tp *sdktrace.TracerProvider) *tracing {
	return &tracing{
		provider: tp,
		tracer:   tp.Tracer("github.com/fastlimit/fastlimit", trace.WithInstrumentationVersion(Version)),
		// Later propagators win: W3C over B3 when a caller sends both.
		prop: propagation.NewCompositeTextMapPropagator(b3.New(), propagation.TraceContext{}, propagation.Baggage{}),
	}
}

// Open starts the OTLP exporter, configured by the SDK's
// OTEL_EXPORTER_OTLP_* variables. It connects lazily: a collector that is
// away costs dropped spans, not a failed start.
func (t *tracing) Open(ctx context.Context) error {
	if t == nil || t.protocol == "" {
		return nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if t.protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	otel.SetErrorHandler(&throttled{log: t.log, every: time.Minute, now: time.Now})
	t.provider.RegisterSpanProcessor(sdktrace.NewBatchSpanProcessor(exp))
	t.log.Info("tracing: spans export over OTLP", zap.String("protocol", t.protocol))
	return nil
}

func newResource(ctx context.Context, o traceOptions) (*resource.Resource, error) {
	id := o.instanceID
	if id == "" {
		id = uuid.NewString()
	}
	attrs := []attribute.KeyValue{
		semconv.ServiceName(o.service),
		semconv.ServiceInstanceID(id),
		semconv.ServiceVersion(Version),
	}
	if o.namespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(o.namespace))
	}
	// OTEL_RESOURCE_ATTRIBUTES add to these; the TRACING_* settings win.
	return resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithSchemaURL(semconv.SchemaURL), resource.WithAttributes(attrs...))
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// grpcOptions returns the interceptor that makes the server span of
// each ShouldRateLimit (none when t is nil).
func (t *tracing) grpcOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(t.unary)}
}

var (
	rlsService, rlsMethod, _ = strings.Cut(strings.TrimPrefix(rls.RateLimitService_ShouldRateLimit_FullMethodName, "/"), "/")
	rlsSpanName              = rlsService + "/" + rlsMethod
)

// unary traces ShouldRateLimit calls (not health checks), continuing
// the trace of the caller's metadata.
func (t *tracing) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod != rls.RateLimitService_ShouldRateLimit_FullMethodName {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = t.prop.Extract(ctx, mdCarrier(md))
	ctx, span := t.tracer.Start(ctx, rlsSpanName, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrRPCSystem.String("grpc"), attrRPCService.String(rlsService), attrRPCMethod.String(rlsMethod)))
	defer span.End()
	if r, ok := req.(*rls.RateLimitRequest); ok {
		span.SetAttributes(attrDomain.String(r.GetDomain()), attrDescriptors.Int(len(r.GetDescriptors())))
	}
	resp, err := handler(ctx, req)
	st := status.Convert(err)
	span.SetAttributes(attrGRPCStatus.Int(int(st.Code())))
	if err != nil {
		span.SetStatus(otelcodes.Error, st.Message())
	} else if r, ok := resp.(*rls.RateLimitResponse); ok {
		span.SetAttributes(attrCode.String(r.GetOverallCode().String()))
	}
	return resp, err
}

// http traces POST /json, continuing the trace of the request's headers;
// other paths pass through.
func (t *tracing) http(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/json" {
			next.ServeHTTP(w, r)
			return
		}
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, "POST /json", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attrHTTPStatus.Int(sw.code))
		if sw.code >= 500 {
			span.SetStatus(otelcodes.Error, http.StatusText(sw.code))
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// mdCarrier reads trace headers from gRPC metadata, whose keys are
// lower case.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// throttled logs the SDK's errors (a collector that is away fails every
// export) at most once per period, with the count of those not logged.
type throttled struct {
	log     *zap.Logger
	every   time.Duration
	now     func() time.Time
	last    atomic.Int64 // Unix ns of the last error logged
	dropped atomic.Int64
}

func (h *throttled) Handle(err error) {
	now := h.now().UnixNano()
	last := h.last.Load()
	if last != 0 && now-last < int64(h.every) || !h.last.CompareAndSwap(last, now) {
		h.dropped.Add(1)
		return
	}
	h.log.Warn("tracing: export failed", zap.Error(err), zap.Int64("errors_not_logged", h.dropped.Swap(0)))
}
