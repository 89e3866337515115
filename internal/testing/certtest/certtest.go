// Package certtest makes X.509 certificates for tests: a CA and the
// server and client certificates it signs, as PEM in memory or as files.
package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // the CA certificate
	key  crypto.Signer
}

// NewCA returns a new CA named name, valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pemBlock("CERTIFICATE", der), key: key}
}

// Leaf is a certificate signed by a CA, with its private key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Options describe a leaf certificate. Without Client or Server, it is
// good for both.
type Options struct {
	CommonName string
	DNS        []string
	IPs        []net.IP
	URIs       []string
	Client     bool // for TLS clients (extended key usage clientAuth)
	Server     bool // for TLS servers (serverAuth)
	// NotBefore and NotAfter bound the validity; zero values give an hour
	// ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Server returns options for a server certificate of localhost and
// 127.0.0.1.
func Server() Options {
	return Options{CommonName: "server", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true}
}

// Issue signs a new leaf certificate, valid for a day unless o says
// otherwise.
func (ca *CA) Issue(t testing.TB, o Options) *Leaf {
	t.Helper()
	key := newKey(t)
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     o.DNS,
		IPAddresses:  o.IPs,
	}
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	if o.Client || !o.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if o.Server || !o.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", kder)}
}

// TLS returns l as a tls.Certificate.
func (l *Leaf) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Files are a CA and a server and a client certificate it signed, with
// their keys, as PEM files in a test's temporary directory.
type Files struct {
	CA                    *CA
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	Server                tls.Certificate // the server certificate and key
	dir                   string
}

// NewFiles makes a CA, a server certificate for localhost, 127.0.0.1 and
// dns, and a client certificate, and writes them as ca.pem, server.pem,
// server-key.pem, client.pem and client-key.pem.
func NewFiles(t testing.TB, dns ...string) *Files {
	t.Helper()
	f := &Files{CA: NewCA(t, "certtest CA"), dir: t.TempDir()}
	f.CAFile = filepath.Join(f.dir, "ca.pem")
	files.Write(t, f.CAFile, f.CA.PEM)
	server := Server()
	server.DNS = append(server.DNS, dns...)
	f.ServerCert, f.ServerKey = f.Issue(t, "server", server)
	f.ClientCert, f.ClientKey = f.Issue(t, "client", Options{Client: true})
	var err error
	if f.Server, err = tls.LoadX509KeyPair(f.ServerCert, f.ServerKey); err != nil {
		t.Fatal(err)
	}
	return f
}

// Issue signs a leaf certificate for o (named name unless o names it)
// with f's CA, and writes it and its key as name.pem and name-key.pem.
func (f *Files) Issue(t testing.TB, name string, o Options) (certFile, keyFile string) {
	t.Helper()
	if o.CommonName == "" {
		o.CommonName = name
	}
	l := f.CA.Issue(t, o)
	certFile, keyFile = filepath.Join(f.dir, name+".pem"), filepath.Join(f.dir, name+"-key.pem")
	files.Write(t, certFile, l.CertPEM)
	files.Write(t, keyFile, l.KeyPEM)
	return certFile, keyFile
}

// ServerTLS is the server side: its certificate and, with mtls, a demand
// for a client certificate signed by the CA.
func (f *Files) ServerTLS(mtls bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{f.Server}, MinVersion: tls.VersionTLS12}
	if mtls {
		cfg.ClientCAs, cfg.ClientAuth = Pool(f.CA), tls.RequireAndVerifyClientCert
	}
	return cfg
}

// Pool returns a pool of the given CAs.
func Pool(cas ...*CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

func newKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
