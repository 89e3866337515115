package xdstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ServerName is the DNS name in the server certificate of Certs, besides
// "localhost" and 127.0.0.1.
const ServerName = "xds.test"

// Certs are a CA and a server and a client certificate it signed, as PEM
// files in a test's temporary directory.
type Certs struct {
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	server                tls.Certificate
	dir                   string
}

// NewCerts makes a CA, a server certificate for ServerName, localhost and
// 127.0.0.1, and a client certificate.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	c := &Certs{dir: t.TempDir()}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "xdstest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if c.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	c.caKey = key
	c.CAFile = c.write(t, "ca.pem", "CERTIFICATE", der)
	c.ServerCert, c.ServerKey = c.Issue(t, "server", x509.ExtKeyUsageServerAuth, ServerName, "localhost")
	c.ClientCert, c.ClientKey = c.Issue(t, "client", x509.ExtKeyUsageClientAuth)
	if c.server, err = tls.LoadX509KeyPair(c.ServerCert, c.ServerKey); err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue signs a certificate for names (and 127.0.0.1 for server use) and
// writes it and its key as name.pem and name-key.pem.
func (c *Certs) Issue(t testing.TB, name string, usage x509.ExtKeyUsage, dnsNames ...string) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return c.write(t, name+".pem", "CERTIFICATE", der), c.write(t, name+"-key.pem", "EC PRIVATE KEY", kb)
}

// ServerTLS is the server side: its certificate and, with mtls, a demand
// for a client certificate signed by the CA.
func (c *Certs) ServerTLS(mtls bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{c.server}, MinVersion: tls.VersionTLS12}
	if mtls {
		pool := x509.NewCertPool()
		pool.AddCert(c.ca)
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg
}

func (c *Certs) write(t testing.TB, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(c.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
