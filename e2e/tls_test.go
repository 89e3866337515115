package e2e_test

import (
	"crypto/tls"
	"fmt"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestMTLS runs the binary as Envoy Gateway does, with gRPC mTLS from the
// reference's variables only, for both ways certificates reach a pod:
// plain files rewritten in place, and a Kubernetes Secret whose "..data"
// symlink is swapped. A client with a certificate decides; clients
// without one, without the SAN or from another CA are refused; a rotated
// server certificate is served to new connections within 2 s while an
// established connection keeps working.
func TestMTLS(t *testing.T) {
	r := redistest.StartServer(t)
	for i, layout := range []string{"files rewritten in place", "Kubernetes Secret ..data swap"} {
		t.Run(layout, func(t *testing.T) {
			// Both layouts share Redis: each counts its own clients.
			secret := strings.HasPrefix(layout, "Kubernetes")
			ca, other := certtest.NewCA(t, "ca"), certtest.NewCA(t, "other")
			first, second := ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())
			dir := filepath.Join(t.TempDir(), "certs")
			put := func(l *certtest.Leaf) {
				pems := map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": ca.PEM}
				if secret {
					files.Volume(t, dir, pems)
					return
				}
				for _, name := range []string{"tls.key", "tls.crt", "ca.crt"} { // the key first: a rewrite is not atomic
					files.Write(t, filepath.Join(dir, name), pems[name])
				}
			}
			put(first)
			files.Write(t, filepath.Join(t.TempDir(), "other-ca.crt"), other.PEM)
			srv := start(t, launch{rules: files.Dir(t, map[string]string{"tls.yaml": tlsRules}), noDial: true,
				flags: []string{"--redis-url", "redis://" + r.Addr + "/0"}, env: envMap(
					"GRPC_SERVER_USE_TLS=true",
					"GRPC_SERVER_TLS_CERT="+filepath.Join(dir, "tls.crt"),
					"GRPC_SERVER_TLS_KEY="+filepath.Join(dir, "tls.key"),
					"GRPC_CLIENT_TLS_CACERT="+filepath.Join(dir, "ca.crt"),
					"GRPC_CLIENT_TLS_SAN=envoy.example",
					// Envoy Gateway sets it; the reference does not read it,
					// and neither may FastLimit: another CA's clients stay out.
					"GRPC_SERVER_TLS_CA_CERT="+filepath.Join(dir, "..", "other-ca.crt"),
				)})
			envoy := ca.Issue(t, certtest.Options{Client: true, DNS: []string{"envoy.example"}}).TLS(t)
			clientConf := func(certs ...tls.Certificate) *tls.Config {
				return &tls.Config{RootCAs: certtest.Pool(ca), ServerName: "localhost", Certificates: certs}
			}
			dial := func(conf *tls.Config) rls.RateLimitServiceClient {
				conn, err := grpc.NewClient(srv.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				return rls.NewRateLimitServiceClient(conn)
			}
			// decide calls on c and returns the code and the connection's
			// server certificate serial and local address.
			decide := func(c rls.RateLimitServiceClient, client string) (rls.RateLimitResponse_Code, *big.Int, string, error) {
				var p peer.Peer
				resp, err := c.ShouldRateLimit(ctxTimeout(t, 10*time.Second), domainRequest("tls", fmt.Sprint(i, client), "client"), grpc.Peer(&p))
				if err != nil {
					return 0, nil, "", err
				}
				info := p.AuthInfo.(credentials.TLSInfo)
				return resp.GetOverallCode(), info.State.PeerCertificates[0].SerialNumber, p.LocalAddr.String(), nil
			}

			established := dial(clientConf(envoy))
			var local string
			for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
				code, serial, addr, err := decide(established, "a")
				if err != nil {
					t.Fatalf("call %d with a client certificate: %v", i, err)
				}
				if code != want || serial.Cmp(first.Cert.SerialNumber) != 0 {
					t.Fatalf("call %d: %v from certificate %x, want %v from %x", i, code, serial, want, first.Cert.SerialNumber)
				}
				local = addr
			}

			for name, conf := range map[string]*tls.Config{
				"no certificate":  clientConf(),
				"lacking the SAN": clientConf(ca.Issue(t, certtest.Options{Client: true, DNS: []string{"other.example"}}).TLS(t)),
				"of another CA (GRPC_SERVER_TLS_CA_CERT's)": clientConf(
					other.Issue(t, certtest.Options{Client: true, DNS: []string{"envoy.example"}}).TLS(t)),
			} {
				_, _, _, err := decide(dial(conf), "refused")
				if status.Code(err) != codes.Unavailable {
					t.Errorf("client with %s: %v, want refused (Unavailable)", name, err)
				}
			}

			put(second)
			rotated := time.Now()
			var servedIn time.Duration
			ok := wait.True(10*time.Second, func() bool {
				start := time.Now()
				c, err := tls.Dial("tcp", srv.GRPC, &tls.Config{RootCAs: certtest.Pool(ca), ServerName: "localhost",
					Certificates: []tls.Certificate{envoy}, NextProtos: []string{"h2"}})
				if err != nil {
					return false
				}
				defer c.Close()
				servedIn = start.Sub(rotated)
				return c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(second.Cert.SerialNumber) == 0
			})
			if !ok {
				t.Fatal("the rotated certificate was not served within 10 s")
			}
			if servedIn > 2*time.Second {
				t.Errorf("the rotated certificate was first served to a connection started %v after the rotation, want within 2s", servedIn)
			}
			t.Logf("rotated certificate served to a connection started %v after the rotation", servedIn)

			code, serial, _, err := decide(dial(clientConf(envoy)), "b")
			if err != nil || code != rls.RateLimitResponse_OK || serial.Cmp(second.Cert.SerialNumber) != 0 {
				t.Errorf("new connection after rotation: %v from %x (%v), want OK from %x", code, serial, err, second.Cert.SerialNumber)
			}
			code, serial, addr, err := decide(established, "c")
			if err != nil || code != rls.RateLimitResponse_OK {
				t.Fatalf("established connection after rotation: %v, %v", code, err)
			}
			if serial.Cmp(first.Cert.SerialNumber) != 0 || addr != local {
				t.Errorf("established connection was replaced: certificate %x from %s, want %x from %s",
					serial, addr, first.Cert.SerialNumber, local)
			}
			if !strings.Contains(srv.logs.String(), "TLS certificate reloaded") {
				t.Error("no reload logged")
			}
		})
	}
}

// TestTLSStartErrors checks that a start with unusable TLS settings fails
// with a message naming the variable.
func TestTLSStartErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	l := ca.Issue(t, certtest.Server())
	files.Write(t, filepath.Join(dir, "tls.crt"), l.CertPEM)
	files.Write(t, filepath.Join(dir, "tls.key"), l.KeyPEM)
	rules := files.Dir(t, map[string]string{"tls.yaml": tlsRules})
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + filepath.Join(dir, "missing.crt"), "GRPC_SERVER_TLS_KEY=" + filepath.Join(dir, "tls.key")},
			"GRPC_SERVER_TLS_CERT: open " + filepath.Join(dir, "missing.crt") + ": no such file"},
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + filepath.Join(dir, "tls.crt")},
			"GRPC_SERVER_TLS_KEY: required when GRPC_SERVER_USE_TLS is true"},
		{[]string{"GRPC_SERVER_USE_TLS=yes"}, `GRPC_SERVER_USE_TLS="yes"`},
	} {
		out, err := runToExit(envMap(tc.env...), "--config", rules, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "")
		if err == nil {
			t.Errorf("%v: started, want a failure", tc.env)
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("%v: output %q lacks %q", tc.env, out, tc.want)
		}
	}
}

// TestTLSRotationRefused rotates the gRPC server's certificate (as a
// Kubernetes Secret, so that each rotation is one atomic change) to one
// that has expired, one not valid yet, and one whose key is another's:
// each is refused when it is written, without waiting for a handshake
// (warned, counted in fastlimit_tls_certificates_refused_total), and new
// connections keep getting the certificate in force. A good rotation
// after them is served.
func TestTLSRotationRefused(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	now := time.Now()
	validity := func(from, to time.Time) certtest.Options {
		o := certtest.Server()
		o.NotBefore, o.NotAfter = from, to
		return o
	}
	first, good := ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())
	expired := ca.Issue(t, validity(now.Add(-48*time.Hour), now.Add(-time.Minute)))
	early := ca.Issue(t, validity(now.Add(time.Hour), now.Add(48*time.Hour)))
	other := ca.Issue(t, certtest.Server())

	dir := filepath.Join(t.TempDir(), "certs")
	put := func(cert, key []byte) {
		files.Volume(t, dir, map[string][]byte{"tls.crt": cert, "tls.key": key})
	}
	put(first.CertPEM, first.KeyPEM)
	admin := loopback.Addr(t)
	srv := start(t, launch{rules: files.Dir(t, map[string]string{"tls.yaml": tlsRules}), noDial: true,
		flags: []string{"--admin-addr", admin, "--grpc-tls", "--grpc-tls-cert", filepath.Join(dir, "tls.crt"),
			"--grpc-tls-key", filepath.Join(dir, "tls.key")}})
	served := func() *big.Int {
		t.Helper()
		c, err := tls.Dial("tcp", srv.GRPC, &tls.Config{RootCAs: certtest.Pool(ca), ServerName: "localhost", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if s := served(); s.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serving %x, want %x", s, first.Cert.SerialNumber)
	}

	refused := `fastlimit_tls_certificates_refused_total{use="grpc_server"}`
	for i, bad := range []struct {
		name      string
		cert, key []byte
		log       string
	}{
		{"expired", expired.CertPEM, expired.KeyPEM, "certificate has expired"},
		{"not valid yet", early.CertPEM, early.KeyPEM, "certificate is not valid yet"},
		{"another's key", first.CertPEM, other.KeyPEM, "private key does not match the certificate"},
	} {
		put(bad.cert, bad.key)
		wait.For(t, 10*time.Second, func() bool { return scrape.Value(t, metricsPage(t, admin), refused) == float64(i+1) })
		if !strings.Contains(srv.logs.String(), bad.log) {
			t.Errorf("%s: refusal not logged with %q", bad.name, bad.log)
		}
		if s := served(); s.Cmp(first.Cert.SerialNumber) != 0 {
			t.Fatalf("after a rotation to a certificate %s, serving %x, want the old %x", bad.name, s, first.Cert.SerialNumber)
		}
	}

	put(good.CertPEM, good.KeyPEM)
	rotated := time.Now()
	wait.For(t, 10*time.Second, func() bool { return served().Cmp(good.Cert.SerialNumber) == 0 })
	t.Logf("a good rotation after three refused served in %v", time.Since(rotated).Round(time.Millisecond))
	if n := scrape.Value(t, metricsPage(t, admin), refused); n != 3 {
		t.Errorf("%s = %v after a good rotation, want 3", refused, n)
	}
}
