package metrics

import "github.com/prometheus/client_golang/prometheus"

// The series of the admin API (NewAdmin).
var (
	adminTokensDef = def{name: "fastlimit_admin_tokens", kind: gauge,
		help: "Bearer tokens of --admin-token-file in force: 0 while the file is missing, holds none, or was refused.",
		see:  "security.md#tokens"}
	adminTokenFileRefusedDef = def{name: "fastlimit_admin_token_file_refused_total", kind: counter,
		help: "Versions of --admin-token-file refused whole (unreadable, a line that is not name:token, a token shorter than 16 bytes, a name given twice): no token is in force until a good version.",
		see:  "security.md#tokens"}
	adminRefusedDef = def{name: "fastlimit_admin_requests_refused_total", kind: counter, labels: []string{"reason"},
		help: "Admin requests refused, by reason: unauthorized (no valid token or client certificate), cross_site (a write from another site, or not JSON), host (a Host header the listener does not answer to).",
		see:  "security.md#what-needs-authorization"}

	adminDefs = []*def{&adminTokensDef, &adminTokenFileRefusedDef, &adminRefusedDef}
)

// Reasons of fastlimit_admin_requests_refused_total.
const (
	AdminUnauthorized = "unauthorized"
	AdminCrossSite    = "cross_site"
	AdminHost         = "host"
)

// Admin counts what the admin API refuses. Its methods are safe for
// concurrent use.
type Admin struct {
	tokens      prometheus.Gauge
	fileRefused prometheus.Counter
	refused     *prometheus.CounterVec
}

// NewAdmin registers the admin API's series on reg, each reason of a
// refusal exported from the start.
func NewAdmin(reg prometheus.Registerer) (*Admin, error) {
	m := &Admin{tokens: adminTokensDef.gauge(), fileRefused: adminTokenFileRefusedDef.counter(), refused: adminRefusedDef.counterVec()}
	for _, r := range []string{AdminUnauthorized, AdminCrossSite, AdminHost} {
		m.refused.WithLabelValues(r)
	}
	return m, register(reg, m.tokens, m.fileRefused, m.refused)
}

// Tokens sets the tokens in force.
func (m *Admin) Tokens(n int) { m.tokens.Set(float64(n)) }

// TokenFileRefused counts a version of the token file refused.
func (m *Admin) TokenFileRefused() { m.fileRefused.Inc() }

// Refused counts a request refused for reason.
func (m *Admin) Refused(reason string) { m.refused.WithLabelValues(reason).Inc() }
