package server

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// tlsFiles writes a CA, a server certificate of 127.0.0.1 and the CA
// file into a directory, and returns it with the CA.
func tlsFiles(t *testing.T) (string, *certtest.CA) {
	t.Helper()
	ca := certtest.NewCA(t, "ca")
	srv := ca.Issue(t, certtest.Server())
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "tls.crt"), srv.CertPEM)
	files.Write(t, filepath.Join(dir, "tls.key"), srv.KeyPEM)
	files.Write(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	return dir, ca
}

func TestGRPCTLSErrors(t *testing.T) {
	dir, _ := tlsFiles(t)
	crt, key, ca := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no certificate", []string{"--grpc-tls", "--grpc-tls-key", key},
			"GRPC_SERVER_TLS_CERT: required when GRPC_SERVER_USE_TLS is true"},
		{"no key", []string{"--grpc-tls", "--grpc-tls-cert", crt},
			"GRPC_SERVER_TLS_KEY: required when GRPC_SERVER_USE_TLS is true"},
		{"certificate file missing", []string{"--grpc-tls", "--grpc-tls-cert", crt + ".x", "--grpc-tls-key", key},
			"GRPC_SERVER_TLS_CERT: open " + crt + ".x: no such file"},
		{"key is the certificate", []string{"--grpc-tls", "--grpc-tls-cert", crt, "--grpc-tls-key", crt},
			"GRPC_SERVER_TLS_KEY: " + crt},
		{"client CA missing", []string{"--grpc-tls", "--grpc-tls-cert", crt, "--grpc-tls-key", key,
			"--grpc-tls-client-ca", ca + ".x"}, "GRPC_CLIENT_TLS_CACERT: open " + ca + ".x: no such file"},
		{"client CA is a key", []string{"--grpc-tls", "--grpc-tls-cert", crt, "--grpc-tls-key", key,
			"--grpc-tls-client-ca", key}, "GRPC_CLIENT_TLS_CACERT: " + key + ": no PEM certificate"},
		{"SAN without client CA", []string{"--grpc-tls", "--grpc-tls-cert", crt, "--grpc-tls-key", key,
			"--grpc-tls-client-san", "envoy"}, "GRPC_CLIENT_TLS_SAN: needs GRPC_CLIENT_TLS_CACERT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := parseSettings(t, append([]string{"--config", dir}, tc.args...), func(string) string { return "" })
			_, err := New(o, zap.NewNop(), prometheus.NewRegistry(), "test")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("newServer error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestGRPCOverMTLS serves decisions and health checks to a client with a
// certificate and refuses one without.
func TestGRPCOverMTLS(t *testing.T) {
	dir, ca := tlsFiles(t)
	rules := t.TempDir()
	files.Write(t, filepath.Join(rules, "d.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	s := testServerOn(t, rules, zaptest.NewLogger(t), "--grpc-tls",
		"--grpc-tls-cert", filepath.Join(dir, "tls.crt"), "--grpc-tls-key", filepath.Join(dir, "tls.key"),
		"--grpc-tls-client-ca", filepath.Join(dir, "ca.crt"), "--grpc-tls-client-san", "envoy.example")
	dial := func(certs ...tls.Certificate) *grpc.ClientConn {
		creds := credentials.NewTLS(&tls.Config{RootCAs: certtest.Pool(ca), Certificates: certs})
		conn, err := grpc.NewClient(s.grpcLis.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	good := dial(ca.Issue(t, certtest.Options{Client: true, DNS: []string{"envoy.example"}}).TLS(t))
	c := rlspb.NewRateLimitServiceClient(good)
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		resp, err := c.ShouldRateLimit(ctx, rlsRequest("d", "k", "v"))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.GetOverallCode() != want {
			t.Errorf("call %d: %v, want %v", i, resp.GetOverallCode(), want)
		}
	}
	hr, err := healthpb.NewHealthClient(good).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health over mTLS: %v, %v", hr, err)
	}

	for name, conn := range map[string]*grpc.ClientConn{
		"no certificate":  dial(),
		"lacking the SAN": dial(ca.Issue(t, certtest.Options{Client: true, DNS: []string{"other.example"}}).TLS(t)),
	} {
		if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsRequest("d", "k", "w")); err == nil {
			t.Errorf("client with %s: decided, want refused", name)
		}
	}
}
