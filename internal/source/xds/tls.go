package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/edge/certs"
)

// TLS names the files of a TLS or mTLS connection to the management
// server; they are read again for every connection.
type TLS struct {
	CertFile, KeyFile string // the client certificate and key for mTLS: both or neither
	CAFile            string // CAs that verify the server; empty: the system's
	ServerName        string // the name the server's certificate must carry; empty: the URL's host
}

// Config reads the files and returns the client configuration. A client
// certificate that does not match its key or is not valid now is an error
// wrapping certs.ErrKeyMismatch, certs.ErrExpired or certs.ErrNotYetValid.
func (t *TLS) Config() (*tls.Config, error) {
	pair, err := t.clientCertificate(time.Now())
	if err != nil {
		return nil, err
	}
	return t.config(pair)
}

// clientCertificate reads and checks the client certificate; nil without one.
func (t *TLS) clientCertificate(now time.Time) (*tls.Certificate, error) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	if t.CertFile == "" {
		return nil, nil
	}
	cert, err := os.ReadFile(t.CertFile)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	key, err := os.ReadFile(t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	pair, err := certs.Pair(certs.File{Name: "client certificate", Path: t.CertFile},
		certs.File{Name: "client key", Path: t.KeyFile}, cert, key, now)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	return &pair, nil
}

// config reads the CA file and returns the configuration with pair, if any.
func (t *TLS) config(pair *tls.Certificate) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if pair != nil {
		cfg.Certificates = []tls.Certificate{*pair}
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

// clientTLS returns the configuration of the next connection. A client
// certificate that cannot be used is refused (reported once per change)
// and the last good one is used; without one, the error is returned. It
// runs on the Client's goroutine only.
func (c *Client) clientTLS() (*tls.Config, error) {
	t := c.opts.TLS
	pair, err := t.clientCertificate(c.opts.Clock.Now())
	switch {
	case err == nil:
		c.clientCert, c.certRefused = pair, ""
	case c.certRefused == err.Error():
		if c.clientCert == nil {
			return nil, err
		}
	default:
		c.certRefused = err.Error()
		if c.opts.OnCertRefused != nil {
			c.opts.OnCertRefused(err)
		}
		if c.clientCert == nil {
			return nil, err // logged by the connect loop
		}
		c.log.Warn("xDS client certificate files changed but cannot be used; the last good certificate stays",
			zap.Error(err), zap.String("serial", c.clientCert.Leaf.SerialNumber.Text(16)))
	}
	return t.config(c.clientCert)
}
