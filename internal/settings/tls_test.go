package settings

import (
	"io"
	"testing"

	"github.com/fastlimit/fastlimit/internal/observe/tracing"
)

// TestTLSAndTracingEnvTwins checks that the flags' environment twins are
// exactly the reference's variables, and that Envoy Gateway's
// GRPC_SERVER_TLS_CA_CERT, which the reference does not read, asks for
// no client certificates.
func TestTLSAndTracingEnvTwins(t *testing.T) {
	env := map[string]string{
		"GRPC_SERVER_USE_TLS":         "true",
		"GRPC_SERVER_TLS_CERT":        "/c/tls.crt",
		"GRPC_SERVER_TLS_KEY":         "/c/tls.key",
		"GRPC_CLIENT_TLS_CACERT":      "/c/ca.crt",
		"GRPC_CLIENT_TLS_SAN":         "envoy.example",
		"GRPC_SERVER_TLS_CA_CERT":     "/c/other-ca.crt",
		"TRACING_ENABLED":             "true",
		"TRACING_SERVICE_NAME":        "rl",
		"TRACING_SERVICE_NAMESPACE":   "ns",
		"TRACING_SERVICE_INSTANCE_ID": "pod-1",
		"TRACING_EXPORTER_PROTOCOL":   "grpc",
		"TRACING_SAMPLING_RATE":       "0.25",
	}
	o, err := Parse("test", nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	wantTLS := TLS{Enabled: true, Cert: "/c/tls.crt", Key: "/c/tls.key", ClientCA: "/c/ca.crt", ClientSAN: "envoy.example"}
	if o.GRPCTLS != wantTLS {
		t.Errorf("tls options %+v, want %+v", o.GRPCTLS, wantTLS)
	}
	wantTrace := tracing.Options{Enabled: true, ServiceName: "rl", ServiceNamespace: "ns", ServiceInstanceID: "pod-1", ExporterProtocol: "grpc", SamplingRate: 0.25}
	if o.Tracing != wantTrace {
		t.Errorf("tracing options %+v, want %+v", o.Tracing, wantTrace)
	}

	d, err := Parse("test", nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d.GRPCTLS.Enabled || d.Tracing.Enabled || d.Tracing.ServiceName != "RateLimit" || d.Tracing.SamplingRate != 1 || d.Tracing.ExporterProtocol != "http" {
		t.Errorf("defaults: tls %+v, tracing %+v", d.GRPCTLS, d.Tracing)
	}
}
