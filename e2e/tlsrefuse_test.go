package e2e_test

import (
	"crypto/tls"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
)

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
		certtest.Secret(t, dir, map[string][]byte{"tls.crt": cert, "tls.key": key})
	}
	put(first.CertPEM, first.KeyPEM)
	admin := loopback(t)
	srv := start(t, launch{rules: writeRules(t, map[string]string{"tls.yaml": tlsRules}), noDial: true,
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
		waitFor(t, 10*time.Second, func() bool { return metricValue(t, scrape(t, admin), refused) == float64(i+1) })
		if !strings.Contains(srv.logs.String(), bad.log) {
			t.Errorf("%s: refusal not logged with %q", bad.name, bad.log)
		}
		if s := served(); s.Cmp(first.Cert.SerialNumber) != 0 {
			t.Fatalf("after a rotation to a certificate %s, serving %x, want the old %x", bad.name, s, first.Cert.SerialNumber)
		}
	}

	put(good.CertPEM, good.KeyPEM)
	rotated := time.Now()
	waitFor(t, 10*time.Second, func() bool { return served().Cmp(good.Cert.SerialNumber) == 0 })
	t.Logf("a good rotation after three refused served in %v", time.Since(rotated).Round(time.Millisecond))
	if n := metricValue(t, scrape(t, admin), refused); n != 3 {
		t.Errorf("%s = %v after a good rotation, want 3", refused, n)
	}
}
