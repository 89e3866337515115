package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSOptions configure TLS to Redis. TLS is on when Enabled is set or the
// URL's scheme is rediss; the other fields then refine it, and setting any
// of them with TLS off is an error rather than a silent plaintext
// connection.
type TLSOptions struct {
	Enabled bool
	// CAFile is a PEM file of the CAs that sign the servers' certificates;
	// empty trusts the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that verify clients (tls-auth-clients yes). Give both or
	// neither.
	CertFile, KeyFile string
	// ServerName is the name the server certificates must hold; empty
	// takes the host of the address dialled (each node's, in a Cluster).
	ServerName string
	// InsecureSkipVerify accepts any server certificate.
	InsecureSkipVerify bool
	// SkipHostnameVerification checks the certificate chain against the
	// CAs but not the name it is issued to (envoyproxy/ratelimit's
	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostnameVerification bool
}

func (o TLSOptions) set() bool {
	return o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.ServerName != "" ||
		o.InsecureSkipVerify || o.SkipHostnameVerification
}

// config returns the TLS configuration, nil when TLS is off. host, if
// set, is the server name to verify when ServerName is empty.
func (o TLSOptions) config(on bool, host string) (*tls.Config, error) {
	if !on {
		if o.set() {
			return nil, errors.New("redis TLS settings given but TLS is off: enable TLS or use a rediss:// URL")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA: no PEM certificate in %s", o.CAFile)
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("redis TLS client certificate: give both the certificate and the key")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	switch {
	case o.InsecureSkipVerify:
		cfg.InsecureSkipVerify = true
	case o.SkipHostnameVerification:
		// Go verifies the chain and the name together; skip both and
		// verify the chain alone.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = verifyChain(cfg.RootCAs)
	}
	return cfg, nil
}

// verifyChain checks a server's certificate chain against roots (the
// system's when nil), whatever name it is issued to.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redis TLS: server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}
