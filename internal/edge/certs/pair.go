package certs

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Refusals of a certificate and key that parse.
var (
	ErrKeyMismatch = errors.New("private key does not match the certificate")
	ErrExpired     = errors.New("certificate has expired")
	ErrNotYetValid = errors.New("certificate is not valid yet")
)

// Pair parses a PEM certificate chain and its key, as tls.X509KeyPair
// does, and checks that the leaf is valid at now. Errors are *Error values
// naming the certificate (ErrNoCertificate, ErrExpired, ErrNotYetValid, a
// bad chain) or the key (ErrKeyMismatch, a bad key).
func Pair(cert, key File, certPEM, keyPEM []byte, now time.Time) (tls.Certificate, error) {
	if certificateBlock(certPEM) == nil {
		return tls.Certificate{}, &Error{File: cert, Err: ErrNoCertificate}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, pairError(cert, key, certPEM, keyPEM, err)
	}
	leaf := pair.Leaf
	switch {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, &Error{File: cert, Err: fmt.Errorf("%w: not after %s", ErrExpired, leaf.NotAfter.UTC().Format(time.RFC3339))}
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, &Error{File: cert, Err: fmt.Errorf("%w: not before %s", ErrNotYetValid, leaf.NotBefore.UTC().Format(time.RFC3339))}
	}
	return pair, nil
}

// pairError names the file that tls.X509KeyPair's err is about.
func pairError(cert, key File, certPEM, keyPEM []byte, err error) error {
	leaf, cerr := firstCertificate(certPEM)
	if cerr != nil {
		return &Error{File: cert, Err: cerr}
	}
	if !parsesAsKey(keyPEM) {
		return &Error{File: key, Err: err}
	}
	return &Error{File: key, Err: fmt.Errorf("%w %s (serial %s): %v", ErrKeyMismatch, leaf.Subject, leaf.SerialNumber.Text(16), err)}
}

func firstCertificate(b []byte) (*x509.Certificate, error) {
	block := certificateBlock(b)
	if block == nil {
		return nil, ErrNoCertificate
	}
	return x509.ParseCertificate(block.Bytes)
}

// certificateBlock returns the first PEM CERTIFICATE block of b, or nil.
func certificateBlock(b []byte) *pem.Block {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil || block.Type == "CERTIFICATE" {
			return block
		}
	}
}

// parsesAsKey reports whether b's first private key parses as crypto/tls would.
func parsesAsKey(b []byte) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if block.Type != "PRIVATE KEY" && !strings.HasSuffix(block.Type, " PRIVATE KEY") {
			continue
		}
		if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
			return true
		}
		if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			switch k.(type) {
			case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
				return true
			}
			return false
		}
		_, err := x509.ParseECPrivateKey(block.Bytes)
		return err == nil
	}
}
