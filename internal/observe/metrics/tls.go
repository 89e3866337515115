package metrics

import "github.com/prometheus/client_golang/prometheus"

// tlsRefusedDef is NewTLS's.
var tlsRefusedDef = def{name: "fastlimit_tls_certificates_refused_total", kind: counter, labels: []string{"use"},
	help: "Rotations of TLS certificate files refused (expired, not valid yet, a key that is not the certificate's, unreadable): the certificate in force stays. By use: grpc_server, xds_client.",
	see:  "tls.md#rotation-and-errors"}

var tlsDefs = []*def{&tlsRefusedDef}

// TLS uses: the labels of fastlimit_tls_certificates_refused_total.
const (
	TLSGRPCServer = "grpc_server"
	TLSXDSClient  = "xds_client"
)

// NewTLS registers the counter of certificate rotations refused on reg,
// by use (TLSGRPCServer, TLSXDSClient, both exported from the start).
func NewTLS(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	refused := tlsRefusedDef.counterVec()
	for _, use := range []string{TLSGRPCServer, TLSXDSClient} {
		refused.WithLabelValues(use)
	}
	return refused, reg.Register(refused)
}
