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

// Refusals of a certificate and key that parse: Pair returns them, and a
// Reloader refuses a rotation with them.
var (
	// ErrKeyMismatch: the private key is not the certificate's.
	ErrKeyMismatch = errors.New("private key does not match the certificate")
	// ErrExpired: the certificate's NotAfter has passed.
	ErrExpired = errors.New("certificate has expired")
	// ErrNotYetValid: the certificate's NotBefore has not come.
	ErrNotYetValid = errors.New("certificate is not valid yet")
)

// Pair parses a PEM certificate chain and its private key, as
// tls.X509KeyPair does, and checks that the leaf certificate is valid at
// now. Errors are *Error values naming the file at fault: the certificate
// for ErrNoCertificate, a chain that does not parse, ErrExpired and
// ErrNotYetValid; the key for a key that does not parse and for
// ErrKeyMismatch.
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

// pairError tells which file tls.X509KeyPair's err is about: a key that
// parses on its own and a chain whose first certificate parses make a
// mismatch; otherwise the file that does not parse.
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

// firstCertificate parses the first CERTIFICATE block of b.
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

// parsesAsKey reports whether the first private key block of b parses,
// in one of the encodings crypto/tls accepts.
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
