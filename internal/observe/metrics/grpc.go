package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
)

// The series of the bounds on gRPC clients (RegisterGRPCBounds).
var (
	grpcConnsDef = def{name: "fastlimit_grpc_connections", kind: gauge,
		help: "gRPC connections open."}
	grpcConnsMaxDef = def{name: "fastlimit_grpc_connections_max", kind: gauge,
		help: "Most gRPC connections held open: --grpc-max-connections, lowered by the open-files limit."}
	grpcConnsRefusedDef = def{name: "fastlimit_grpc_connections_refused_total", kind: counter,
		help: "gRPC connections closed at once because fastlimit_grpc_connections_max were open."}
	grpcStreamsRefusedDef = def{name: "fastlimit_grpc_streams_refused_total", kind: counter,
		help: "gRPC calls refused (ResourceExhausted) because --grpc-max-concurrent-streams were in flight on their connection."}
	grpcTimedOutDef = def{name: "fastlimit_grpc_requests_timed_out_total", kind: counter,
		help: "Unary gRPC calls dropped at --grpc-request-timeout, their request unfinished or their answer not sent."}
	grpcIdleClosedDef = def{name: "fastlimit_grpc_idle_connections_closed_total", kind: counter,
		help: "gRPC connections that ended after --grpc-max-connection-idle without a call (closed by the server as idle)."}

	grpcDefs = []*def{&grpcConnsDef, &grpcConnsMaxDef, &grpcConnsRefusedDef,
		&grpcStreamsRefusedDef, &grpcTimedOutDef, &grpcIdleClosedDef}
)

const httpWhen = "for each listener bound (`prometheus`: `USE_PROMETHEUS`; `metrics`: `--metrics-addr`)"

// The series of the HTTP listeners' connections (RegisterHTTPListeners).
var (
	httpConnsDef = def{name: "fastlimit_http_connections", kind: gauge, labels: []string{"listener"},
		when: httpWhen,
		help: "Connections open on an HTTP listener (http: health and /json; admin; metrics: --metrics-addr; prometheus: the reference's)."}
	httpRefusedDef = def{name: "fastlimit_http_connections_refused_total", kind: counter, labels: []string{"listener"},
		when: httpWhen,
		help: "Connections to an HTTP listener closed at once because its cap was reached."}

	httpDefs = []*def{&httpConnsDef, &httpRefusedDef}
)

// GRPCBounds are what the bounds on gRPC clients hold and refused, read at
// scrape time.
type GRPCBounds struct {
	// Conns reads the gRPC listener's connections; it must be cheap and
	// safe for concurrent use.
	Conns func() connlimit.Stats
	// StreamsRefused, TimedOut and IdleClosed count the calls refused past
	// --grpc-max-concurrent-streams, the unary calls dropped at
	// --grpc-request-timeout and the connections closed as idle.
	StreamsRefused, TimedOut, IdleClosed *atomic.Int64
}

// RegisterGRPCBounds registers the series of the gRPC bounds on reg.
func RegisterGRPCBounds(reg prometheus.Registerer, b GRPCBounds) error {
	conns := func(f func(connlimit.Stats) int64) func() float64 {
		return func() float64 { return float64(f(b.Conns())) }
	}
	count := func(v *atomic.Int64) func() float64 { return func() float64 { return float64(v.Load()) } }
	return register(reg,
		grpcConnsDef.read(conns(func(s connlimit.Stats) int64 { return s.Open })),
		grpcConnsMaxDef.read(conns(func(s connlimit.Stats) int64 { return s.Max })),
		grpcConnsRefusedDef.read(conns(func(s connlimit.Stats) int64 { return s.Refused })),
		grpcStreamsRefusedDef.read(count(b.StreamsRefused)),
		grpcTimedOutDef.read(count(b.TimedOut)),
		grpcIdleClosedDef.read(count(b.IdleClosed)),
	)
}

// RegisterHTTPListeners registers the connection counts of the HTTP
// listeners on reg, by name; a listener's func reports false while it is
// not bound, and its series are then not exported.
func RegisterHTTPListeners(reg prometheus.Registerer, listeners map[string]func() (connlimit.Stats, bool)) error {
	return reg.Register(&listenerCollector{listeners: listeners, open: httpConnsDef.desc(), refused: httpRefusedDef.desc()})
}

// listenerCollector exports the HTTP listeners' connection counts.
type listenerCollector struct {
	listeners     map[string]func() (connlimit.Stats, bool)
	open, refused *prometheus.Desc
}

func (c *listenerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.refused
}

func (c *listenerCollector) Collect(ch chan<- prometheus.Metric) {
	for name, stats := range c.listeners {
		st, ok := stats()
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.open, httpConnsDef.valueType(), float64(st.Open), name)
		ch <- prometheus.MustNewConstMetric(c.refused, httpRefusedDef.valueType(), float64(st.Refused), name)
	}
}
