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
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fastlimit/fastlimit/internal/xdstest"
)

// TestEnvoyGatewayEnvironment starts the binary as Envoy Gateway starts
// envoyproxy/ratelimit: no flags, its environment only (plus
// GRPC_CLIENT_TLS_CACERT, and the ports moved so that the test can run
// beside others), rules over xDS from go-control-plane's own server over
// mTLS, gRPC served over mTLS, the reference's metrics on PROMETHEUS_ADDR.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	r := startRedis(t)
	certs := xdstest.NewCerts(t)
	xdsAddr, set, cp := startControlPlane(t, certs.ServerTLS(true))
	port, grpcPort, debugPort, promPort := freePort(t), freePort(t), freePort(t), freePort(t)
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
		// Ours: Envoy's client certificates are required and checked.
		"GRPC_CLIENT_TLS_CACERT": certs.CAFile,
		// Moved from 8080, 8081 and 6070.
		"PORT":       fmt.Sprint(port),
		"GRPC_PORT":  fmt.Sprint(grpcPort),
		"DEBUG_PORT": fmt.Sprint(debugPort),
	}
	// Started as Envoy Gateway starts it: no flags, its environment.
	start(t, launch{env: env, envOnly: true, noDial: true})

	// Envoy Gateway's startup, readiness and liveness probe.
	health := fmt.Sprintf("http://127.0.0.1:%d/healthcheck", port)
	if !waitUntil(15*time.Second, func() bool { return httpCode(health[len("http://"):]) == http.StatusOK }) {
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
	for n := 0; call(fmt.Sprintf("poll-%d", n)).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 10; n++ {
		if time.Since(start) > 5*time.Second {
			t.Fatal("v2 not in effect after 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(start); took >= time.Second {
		t.Errorf("v2 took %v to take effect, want under 1 s", took)
	}

	// A bad snapshot is NACKed with its error; the last good rules decide.
	set("v3", egRules(10), xdstest.Config("bad", "eg-bad",
		&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, Unlimited: true}}))
	nack, err := cp.WaitNACK(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "resource 'bad'") {
		t.Errorf("NACK says %q, want the bad resource named", msg)
	}
	if lim := call("bob").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); lim != 10 {
		t.Errorf("after the bad v3: limit %d, want v2's 10", lim)
	}

	// The reference's series, on PROMETHEUS_ADDR.
	series := scrapeSeries(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", promPort))
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
