package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLS names the files of a TLS or mTLS connection to the management
// server. The files are read again for every connection, so certificates
// rotated on disk (a Kubernetes Secret) are used from the next reconnect.
type TLS struct {
	// CertFile and KeyFile are the client certificate and key for mTLS;
	// both or neither.
	CertFile, KeyFile string
	// CAFile holds the CAs that verify the server; empty: the system's.
	CAFile string
	// ServerName is the name the server's certificate must carry;
	// empty: the host of the server URL.
	ServerName string
}

// Config reads the files and returns the client configuration.
func (t *TLS) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	if t.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read CA: no PEM certificate in %s", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
