package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSOptions configure TLS to Redis, on with Enabled or a rediss URL. Any
// other field set with TLS off is an error, not a plaintext connection.
type TLSOptions struct {
	Enabled bool
	// CA is a PEM file of the CAs of the servers' certificates (empty: the
	// system's).
	CA string
	// Cert and Key are PEM files of a client certificate and its key, both
	// or neither.
	Cert, Key string
	// ServerName is the name to verify (empty: the host dialled).
	ServerName string
	// SkipVerify accepts any server certificate.
	SkipVerify bool
	// SkipHostnameVerification checks the chain but not the name.
	SkipHostnameVerification bool
}

func (o TLSOptions) set() bool {
	return o.CA != "" || o.Cert != "" || o.Key != "" || o.ServerName != "" ||
		o.SkipVerify || o.SkipHostnameVerification
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
	if o.CA != "" {
		pem, err := os.ReadFile(o.CA)
		if err != nil {
			return nil, fmt.Errorf("redis TLS CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA: no PEM certificate in %s", o.CA)
		}
	}
	if (o.Cert == "") != (o.Key == "") {
		return nil, errors.New("redis TLS client certificate: give both the certificate and the key")
	}
	if o.Cert != "" {
		cert, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	switch {
	case o.SkipVerify:
		cfg.InsecureSkipVerify = true
	case o.SkipHostnameVerification: // Go checks chain and name together
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
