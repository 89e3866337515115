// Package tracing makes OpenTelemetry spans of rate-limit decisions and
// exports them over OTLP: a server span per traced gRPC call or HTTP
// request, continuing the caller's W3C or B3 context, and a client span per
// store call. A nil *Tracing is tracing off and costs nothing.
package tracing

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
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

// The reference's variables, which errors name.
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

// Options turn tracing on. The exporter's endpoint, headers, TLS and
// timeouts come from the SDK's own OTEL_EXPORTER_OTLP_* variables.
type Options struct {
	Enabled           bool
	ServiceName       string  // the resource's service.name
	ServiceNamespace  string  // service.namespace; empty: none
	ServiceInstanceID string  // service.instance.id; empty: a random UUID
	ExporterProtocol  string  // OTLP over http (protobuf) or grpc, in any case
	SamplingRate      float64 // share of traces sampled when the caller did not decide
	Version           string  // the build's version: service.version
}

// Validate checks the options of enabled tracing.
func (o Options) Validate() error {
	if !o.Enabled {
		return nil
	}
	switch strings.ToLower(o.ExporterProtocol) {
	case "http", "grpc":
	default:
		return fmt.Errorf("%s: %q is neither http nor grpc", envTracingProtocol, o.ExporterProtocol)
	}
	if math.IsNaN(o.SamplingRate) || o.SamplingRate < 0 || o.SamplingRate > 1 {
		return fmt.Errorf("%s: %v is not between 0 and 1", envTracingRate, o.SamplingRate)
	}
	return nil
}

// Tracing makes the spans of decisions and exports them. A nil *Tracing
// is tracing off: nothing is installed and nothing is spent. New starts
// nothing; Open starts the exporter; Shutdown flushes and stops it.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	protocol string // http or grpc; empty: the provider exports already
	log      *zap.Logger
}

// New returns nil when tracing is off.
func New(o Options, log *zap.Logger) (*Tracing, error) {
	if !o.Enabled {
		return nil, nil
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res, err := newResource(context.Background(), o)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SamplingRate))),
	)
	t := NewWith(tp, o.Version)
	t.protocol, t.log = strings.ToLower(o.ExporterProtocol), log
	return t, nil
}

// NewWith traces on tp, whose span processors are set (tests export to
// memory); version is the instrumentation's.
func NewWith(tp *sdktrace.TracerProvider, version string) *Tracing {
	return &Tracing{
		provider: tp,
		tracer:   tp.Tracer("github.com/fastlimit/fastlimit", trace.WithInstrumentationVersion(version)),
		// Later propagators win: W3C over B3 when a caller sends both.
		prop: propagation.NewCompositeTextMapPropagator(b3.New(), propagation.TraceContext{}, propagation.Baggage{}),
	}
}

// Open starts the OTLP exporter (OTEL_EXPORTER_OTLP_*). It connects
// lazily: a collector that is away costs dropped spans, not a failed start.
func (t *Tracing) Open(ctx context.Context) error {
	if t == nil || t.protocol == "" {
		return nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	otel.SetLogger(logr.New(sdkLog{t.log}))
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

func newResource(ctx context.Context, o Options) (*resource.Resource, error) {
	id := o.ServiceInstanceID
	if id == "" {
		id = uuid.NewString()
	}
	attrs := []attribute.KeyValue{
		semconv.ServiceName(o.ServiceName),
		semconv.ServiceInstanceID(id),
		semconv.ServiceVersion(o.Version),
	}
	if o.ServiceNamespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(o.ServiceNamespace))
	}
	// OTEL_RESOURCE_ATTRIBUTES add to these; the TRACING_* settings win.
	return resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithSchemaURL(semconv.SchemaURL), resource.WithAttributes(attrs...))
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// ServerOptions install UnaryInterceptor for the given full gRPC methods;
// none when t is nil.
func (t *Tracing) ServerOptions(methods ...string) []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(t.UnaryInterceptor(methods...))}
}

// UnaryInterceptor makes a server span of each call of the given full gRPC
// methods, continuing the caller's trace; other calls pass through.
func (t *Tracing) UnaryInterceptor(methods ...string) grpc.UnaryServerInterceptor {
	traced := map[string]spanName{}
	for _, m := range methods {
		service, method, _ := strings.Cut(strings.TrimPrefix(m, "/"), "/")
		traced[m] = spanName{service + "/" + method, service, method}
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		n, ok := traced[info.FullMethod]
		if !ok {
			return handler(ctx, req)
		}
		return t.unary(ctx, n, req, handler)
	}
}

// spanName is a traced method's span name, service and method.
type spanName struct{ name, service, method string }

// unary runs handler in the server span of a call of n.
func (t *Tracing) unary(ctx context.Context, n spanName, req any, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = t.prop.Extract(ctx, mdCarrier(md))
	ctx, span := t.tracer.Start(ctx, n.name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrRPCSystem.String("grpc"), attrRPCService.String(n.service), attrRPCMethod.String(n.method)))
	defer span.End()
	resp, err := handler(ctx, req)
	st := status.Convert(err)
	span.SetAttributes(attrGRPCStatus.Int(int(st.Code())))
	if err != nil {
		span.SetStatus(otelcodes.Error, st.Message())
	}
	return resp, err
}

// Spans annotates the span of a decision's context (rls.Annotator).
type Spans struct{}

// Decision records a request's domain and number of descriptors (never
// their values) in the span of ctx, if one is recording.
func (Spans) Decision(ctx context.Context, domain string, descriptors int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		// OTLP carries strings as protobuf strings: a domain that is not
		// UTF-8 would fail the export of the whole batch.
		span.SetAttributes(attrDomain.String(strings.ToValidUTF8(domain, "\uFFFD")), attrDescriptors.Int(descriptors))
	}
}

// Decided records a decision's overall code in the span of ctx.
func (Spans) Decided(ctx context.Context, code string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrCode.String(code))
	}
}

// HTTP traces every request of next as a server span called name,
// continuing the headers' trace; next itself when t is nil.
func (t *Tracing) HTTP(name string, next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
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

// mdCarrier reads trace headers from gRPC metadata (lower-case keys).
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

// sdkLog logs the SDK's own lines (a malformed OTEL_EXPORTER_OTLP_*
// variable), warnings and errors, without their key/values: they may
// quote a header's token.
type sdkLog struct{ log *zap.Logger }

func (sdkLog) Init(logr.RuntimeInfo)                   {}
func (sdkLog) Enabled(level int) bool                  { return level <= 1 } // the SDK's Warn is V(1)
func (l sdkLog) Info(_ int, msg string, _ ...any)      { l.log.Warn("tracing: " + msg) }
func (l sdkLog) Error(err error, msg string, _ ...any) { l.log.Warn("tracing: "+msg, zap.Error(err)) }
func (l sdkLog) WithValues(...any) logr.LogSink        { return l }
func (l sdkLog) WithName(string) logr.LogSink          { return l }

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
