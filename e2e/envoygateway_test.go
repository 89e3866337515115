package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/internal/testing/xdstest"
)

// TestEnvoyGatewayEnvironment starts the binary as Envoy Gateway starts
// envoyproxy/ratelimit: no flags, its environment only (plus
// GRPC_CLIENT_TLS_CACERT, and the ports moved so that the test can run
// beside others), rules over xDS from go-control-plane's own server over
// mTLS, gRPC served over mTLS, the reference's metrics on PROMETHEUS_ADDR.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	r := redistest.StartServer(t)
	certs := certtest.NewFiles(t, xdstest.ServerName)
	xdsAddr, set, cp := startControlPlane(t, certs.ServerTLS(true))
	port, grpcPort, debugPort, promPort := loopback.Port(t), loopback.Port(t), loopback.Port(t), loopback.Port(t)
	env := map[string]string{
		// Envoy Gateway's environment for its rate-limit container.
		"RUNTIME_ROOT":                       "/data",
		"RUNTIME_SUBDIRECTORY":               "ratelimit",
		"RUNTIME_IGNOREDOTFILES":             "true",
		"RUNTIME_WATCH_ROOT":                 "false",
		"LOG_LEVEL":                          "info",
		"USE_STATSD":                         "false",
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":         xdsAddr,
		"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS":                "true",
		"GRPC_SERVER_TLS_CERT":               certs.ServerCert,
		"GRPC_SERVER_TLS_KEY":                certs.ServerKey,
		"GRPC_SERVER_TLS_CA_CERT":            certs.CAFile,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    certs.ClientCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     certs.ClientKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  certs.CAFile,
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE":                  "tcp",
		"REDIS_URL":                          r.Addr,
		"USE_PROMETHEUS":                     "true",
		"PROMETHEUS_ADDR":                    fmt.Sprintf(":%d", promPort),
		// Ours: Envoy's client certificates are required and checked, and
		// the answers carry dynamic metadata (the rules' metadata).
		"GRPC_CLIENT_TLS_CACERT":    certs.CAFile,
		"RESPONSE_DYNAMIC_METADATA": "true",
		// Moved from 8080, 8081 and 6070.
		"PORT":       fmt.Sprint(port),
		"GRPC_PORT":  fmt.Sprint(grpcPort),
		"DEBUG_PORT": fmt.Sprint(debugPort),
	}
	// Started as Envoy Gateway starts it: no flags, its environment.
	start(t, launch{env: env, envOnly: true, noDial: true})

	// Envoy Gateway's startup, readiness and liveness probe.
	health := fmt.Sprintf("http://127.0.0.1:%d/healthcheck", port)
	if !wait.True(15*time.Second, func() bool { return httpCode(health[len("http://"):]) == http.StatusOK }) {
		t.Fatalf("GET %s never answered 200", health)
	}

	set("v1", egRules(2))
	if _, err := cp.WaitACK(15*time.Second, "v1"); err != nil {
		t.Fatal(err)
	}

	// Envoy's side: gRPC over mTLS with a client certificate of the CA.
	ca, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	clientCert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	target := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	dial := func(withCert bool) rls.RateLimitServiceClient {
		cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if withCert {
			cfg.Certificates = []tls.Certificate{clientCert}
		}
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return rls.NewRateLimitServiceClient(conn)
	}
	envoy := dial(true)
	ctx := ctxTimeout(t, time.Minute)
	call := func(user string) *rls.RateLimitResponse {
		t.Helper()
		resp, err := envoy.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "eg",
			Descriptors: []*common.RateLimitDescriptor{desc("user", user)}})
		if err != nil {
			t.Fatalf("ShouldRateLimit over mTLS: %v", err)
		}
		return resp
	}
	for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OK,
		rls.RateLimitResponse_OVER_LIMIT} {
		if got := call("alice").GetOverallCode(); got != want {
			t.Fatalf("hit %d of alice under 2/minute: %v, want %v", i+1, got, want)
		}
	}

	// A client without a certificate is refused.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = dial(false).ShouldRateLimit(cctx, &rls.RateLimitRequest{Domain: "eg",
		Descriptors: []*common.RateLimitDescriptor{desc("user", "mallory")}})
	cancel()
	if err == nil {
		t.Fatal("a client without a certificate was answered")
	}

	// A new snapshot is in effect in under a second.
	set("v2", egRules(10))
	start := time.Now()
	n := 0
	if !wait.True(5*time.Second, func() bool {
		n++
		return call(fmt.Sprintf("poll-%d", n)).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 10
	}) {
		t.Fatal("v2 not in effect after 5 s")
	}
	if took := time.Since(start); took >= time.Second {
		t.Errorf("v2 took %v to take effect, want under 1 s", took)
	}

	// A bad snapshot is NACKed with its error; the last good rules decide.
	nack := setBad(t, set, cp, egRules(10), "bad", "eg-bad")
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "resource 'bad'") {
		t.Errorf("NACK says %q, want the bad resource named", msg)
	}
	if lim := call("bob").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); lim != 10 {
		t.Errorf("after the bad v3: limit %d, want v2's 10", lim)
	}

	checkEveryUnit(t, set, cp, envoy)

	// The reference's series, on PROMETHEUS_ADDR.
	series := scrape.Series(t, metricsPage(t, fmt.Sprintf("127.0.0.1:%d", promPort)))
	key := `ratelimit_service_rate_limit_over_limit{domain="eg",key1="user"}`
	t.Logf("%s = %v; v2 in effect after %v; NACK %q", key, series[key], time.Since(start), nack.GetErrorDetail().GetMessage())
	if series[key] < 1 {
		t.Errorf("%s = %v, want alice's denied hit counted", key, series[key])
	}
	if code := httpCode(fmt.Sprintf("127.0.0.1:%d/metrics", debugPort)); code != http.StatusOK {
		t.Errorf("GET /metrics on DEBUG_PORT: %d", code)
	}
}

// egRules is the rate-limit configuration Envoy Gateway would push: users
// limited to rpu a minute.
func egRules(rpu uint32) *rlsconf.RateLimitConfig {
	return xdstest.Config("eg-rules", "eg", xdstest.Limit("user", "", rlsconf.RateLimitUnit_MINUTE, rpu))
}

// unitRules are a snapshot of the current proto's every unit (limit 1
// each), two quota_mode descriptors and one with metadata.
func unitRules() *rlsconf.RateLimitConfig {
	meta, err := structpb.NewStruct(map[string]any{"team": "payments", "tier": map[string]any{"weight": 3}})
	if err != nil {
		panic(err)
	}
	var ds []*rlsconf.RateLimitDescriptor
	for _, u := range egUnits {
		ds = append(ds, xdstest.Limit(u.key, "", u.unit, 1))
	}
	q1, q2 := xdstest.Limit("q1", "", rlsconf.RateLimitUnit_HOUR, 1), xdstest.Limit("q2", "", rlsconf.RateLimitUnit_HOUR, 1)
	q1.QuotaMode, q2.QuotaMode = true, true
	m := xdstest.Limit("meta", "", rlsconf.RateLimitUnit_HOUR, 10)
	m.Metadata = meta
	return xdstest.Config("eg-units", "units", append(ds, q1, q2, m)...)
}

// egUnits are the units of the RateLimitConfig proto, with the windows
// the reference gives them.
var egUnits = []struct {
	key     string
	unit    rlsconf.RateLimitUnit
	seconds int64
}{
	{"second", rlsconf.RateLimitUnit_SECOND, 1}, {"minute", rlsconf.RateLimitUnit_MINUTE, 60},
	{"hour", rlsconf.RateLimitUnit_HOUR, 3600}, {"day", rlsconf.RateLimitUnit_DAY, 86400},
	{"week", rlsconf.RateLimitUnit_WEEK, 7 * 86400}, {"month", rlsconf.RateLimitUnit_MONTH, 30 * 86400},
	{"year", rlsconf.RateLimitUnit_YEAR, 365 * 86400},
}

// checkEveryUnit serves a snapshot with every unit, quota_mode and
// metadata, and checks that each is decided as the reference decides it;
// then a snapshot with a unit no proto knows is NACKed by number while
// the last good rules decide.
func checkEveryUnit(t *testing.T, set func(string, ...*rlsconf.RateLimitConfig), cp *xdstest.Server, envoy rls.RateLimitServiceClient) {
	t.Helper()
	set("v4", unitRules())
	if _, err := cp.WaitACK(15*time.Second, "v4"); err != nil {
		t.Fatalf("the snapshot of every unit was not ACKed: %v", err)
	}
	ctx := ctxTimeout(t, time.Minute)
	id := fmt.Sprint(time.Now().UnixNano())
	// The snapshot is ACKed before it is in force everywhere: wait for the
	// domain to be known, on a descriptor of its own, so that no counted
	// request is sent twice.
	wait.For(t, 5*time.Second, func() bool {
		resp, err := envoy.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "units",
			Descriptors: []*common.RateLimitDescriptor{desc(egUnits[0].key, "probe-"+id)}})
		return err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil
	})
	send := func(ds ...*common.RateLimitDescriptor) (*rls.RateLimitResponse, error) {
		return envoy.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "units", Descriptors: ds})
	}
	call := func(ds ...*common.RateLimitDescriptor) *rls.RateLimitResponse {
		t.Helper()
		resp, err := send(ds...)
		if err != nil {
			t.Fatalf("%v: %v", ds, err)
		}
		return resp
	}
	for _, u := range egUnits {
		var codes []rls.RateLimitResponse_Code
		// Two hits in one window: a second's window may end between them,
		// so a per-second pair that straddles it is sent again, as is a
		// pair one of whose calls failed (a slow store on a busy machine).
		for try := 0; try < 5; try++ {
			first, err1 := send(desc(u.key, id))
			second, err2 := send(desc(u.key, id))
			if err1 != nil || err2 != nil {
				t.Logf("%s: %v, %v: sent again", u.key, err1, err2)
				id += "-again"
				continue
			}
			codes = []rls.RateLimitResponse_Code{first.GetOverallCode(), second.GetOverallCode()}
			st := first.GetStatuses()[0]
			if st.GetCurrentLimit().GetUnit().String() != u.unit.String() || st.GetCurrentLimit().GetRequestsPerUnit() != 1 {
				t.Errorf("%s: limit %v", u.key, st.GetCurrentLimit())
			}
			if d := st.GetDurationUntilReset(); d.GetNanos() != 0 || d.GetSeconds() < 1 || d.GetSeconds() > u.seconds {
				t.Errorf("%s: duration_until_reset %v, want whole seconds in [1, %d]", u.key, d.AsDuration(), u.seconds)
			}
			if codes[1] == rls.RateLimitResponse_OVER_LIMIT || u.seconds > 1 {
				break
			}
			id += "-again"
		}
		if len(codes) != 2 || codes[0] != rls.RateLimitResponse_OK || codes[1] != rls.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s limit 1: %v, want OK then OVER_LIMIT", u.key, codes)
		}
	}

	// Quota mode (envoyproxy/ratelimit#1059): OVER_LIMIT only when every
	// quota descriptor of the request is over.
	if got := call(desc("q1", id+"a"), desc("q2", id+"b")).GetOverallCode(); got != rls.RateLimitResponse_OK {
		t.Errorf("quota, first hits: %v", got)
	}
	resp := call(desc("q1", id+"a"), desc("q2", id+"c"))
	if resp.GetOverallCode() != rls.RateLimitResponse_OK || resp.GetStatuses()[0].GetCode() != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("quota, one of two over: %v, want OK with the first status OVER_LIMIT", resp)
	}
	if got := call(desc("q1", id+"a"), desc("q2", id+"b")).GetOverallCode(); got != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("quota, both over: %v, want OVER_LIMIT", got)
	}

	// The metadata of a passed descriptor comes back in the dynamic metadata.
	resp = call(desc("meta", id))
	md := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue()
	if md.GetFields()["team"].GetStringValue() != "payments" {
		t.Errorf("dynamic metadata %v, want the rule's metadata", resp.GetDynamicMetadata())
	}

	// A unit no proto knows: NACKed by number, the last good rules decide.
	bad := unitRules()
	bad.Descriptors = append(bad.Descriptors, &rlsconf.RateLimitDescriptor{Key: "future",
		RateLimit: &rlsconf.RateLimitPolicy{Unit: 9, RequestsPerUnit: 1}})
	set("v5", bad)
	// The NACK of v5 (the stream also holds v3's) names the number.
	if _, err := cp.Wait(15*time.Second, func(r *discovery.DiscoveryRequest) bool {
		return r.GetErrorDetail() != nil && strings.Contains(r.GetErrorDetail().GetMessage(), "resource 'eg-units' descriptor units.future") &&
			strings.Contains(r.GetErrorDetail().GetMessage(), "invalid rate limit unit '9'")
	}); err != nil {
		t.Fatalf("no NACK naming the unit's number: %v", err)
	}
	if got := call(desc("week", id+"-after")).GetStatuses()[0].GetCurrentLimit().GetUnit(); got != rls.RateLimitResponse_RateLimit_WEEK {
		t.Errorf("after the NACK, week limit unit %v, want v4's WEEK", got)
	}
}
