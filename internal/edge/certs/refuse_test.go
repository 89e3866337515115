package certs_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/edge/certs"
	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// unservable returns certificates of ca that cannot be served now, and
// the error and file name each must be refused with.
func unservable(t *testing.T, ca *certtest.CA) []struct {
	name     string
	cert     []byte
	key      []byte
	want     error
	wantFile string
} {
	now := time.Now()
	expired := certtest.Server()
	expired.NotBefore, expired.NotAfter = now.Add(-48*time.Hour), now.Add(-time.Minute)
	early := certtest.Server()
	early.NotBefore, early.NotAfter = now.Add(time.Hour), now.Add(48*time.Hour)
	a, b := ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())
	e, y := ca.Issue(t, expired), ca.Issue(t, early)
	return []struct {
		name     string
		cert     []byte
		key      []byte
		want     error
		wantFile string
	}{
		{"expired", e.CertPEM, e.KeyPEM, certs.ErrExpired, nameCert},
		{"not valid yet", y.CertPEM, y.KeyPEM, certs.ErrNotYetValid, nameCert},
		{"key of another certificate", a.CertPEM, b.KeyPEM, certs.ErrKeyMismatch, nameKey},
		{"no certificate", []byte("garbage"), a.KeyPEM, certs.ErrNoCertificate, nameCert},
	}
}

func TestPair(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	good := ca.Issue(t, certtest.Server())
	cert, key := certs.File{Name: nameCert, Path: "c.pem"}, certs.File{Name: nameKey, Path: "k.pem"}
	if p, err := certs.Pair(cert, key, good.CertPEM, good.KeyPEM, time.Now()); err != nil || p.Leaf.SerialNumber.Cmp(good.Cert.SerialNumber) != 0 {
		t.Fatalf("Pair of a good certificate: %v", err)
	}
	cases := unservable(t, ca)
	cases = append(cases, []struct {
		name     string
		cert     []byte
		key      []byte
		want     error
		wantFile string
	}{
		{"key that does not parse", good.CertPEM, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), nil, nameKey},
		{"certificate in the key file", good.CertPEM, good.CertPEM, nil, nameKey},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := certs.Pair(cert, key, tc.cert, tc.key, time.Now())
			var ce *certs.Error
			switch {
			case !errors.As(err, &ce):
				t.Fatalf("err = %v, want a *certs.Error", err)
			case ce.File.Name != tc.wantFile:
				t.Errorf("err %v names %s, want %s", err, ce.File.Name, tc.wantFile)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("err = %v, want %v", err, tc.want)
			case tc.want == nil && errors.Is(err, certs.ErrKeyMismatch):
				t.Errorf("err = %v: a key that does not parse is no mismatch", err)
			}
		})
	}
}

// TestRotationRefused rotates to files that cannot be served: the first
// read refuses them (warned, counted, OnRefused called once), the
// certificate in force keeps being served, and a good rotation after is
// taken in.
func TestRotationRefused(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	a, good := ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())
	for _, tc := range unservable(t, ca) {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writePair(t, dir, a)
			core, logs := observer.New(zapcore.InfoLevel)
			var mu sync.Mutex
			var refusals []error
			o, clk := clocked(dir, false)
			o.OnRefused = func(err error) {
				mu.Lock()
				defer mu.Unlock()
				refusals = append(refusals, err)
			}
			r := mustNew(t, o, zap.New(core))
			files.Write(t, filepath.Join(dir, "tls.crt"), tc.cert)
			files.Write(t, filepath.Join(dir, "tls.key"), tc.key)
			for range 3 {
				clk.Advance(certs.DefaultInterval)
				if got := r.Leaf().SerialNumber; got.Cmp(a.Cert.SerialNumber) != 0 {
					t.Fatalf("serial %x served, want the old %x", got, a.Cert.SerialNumber)
				}
			}
			mu.Lock()
			got := refusals
			mu.Unlock()
			var ce *certs.Error
			switch {
			case len(got) != 1 || r.Refused() != 1:
				t.Fatalf("OnRefused called %d times, Refused %d, want 1: %v", len(got), r.Refused(), got)
			case !errors.Is(got[0], tc.want) || !errors.As(got[0], &ce) || ce.File.Name != tc.wantFile:
				t.Errorf("refused with %v, want %v naming %s", got[0], tc.want, tc.wantFile)
			}
			if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
				t.Errorf("%d warnings, want 1: %v", n, logs.All())
			}

			writePair(t, dir, good)
			clk.Advance(certs.DefaultInterval)
			if got := r.Leaf().SerialNumber; got.Cmp(good.Cert.SerialNumber) != 0 {
				t.Fatalf("after a good rotation, serial %x, want %x", got, good.Cert.SerialNumber)
			}
		})
	}
}

// TestNotYetValidTakenInOnceValid: a rotated certificate refused as not
// valid yet is served once its NotBefore has come, without another write.
func TestNotYetValidTakenInOnceValid(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	a := ca.Issue(t, certtest.Server())
	o := certtest.Server()
	o.NotBefore, o.NotAfter = time.Now().Add(time.Hour), time.Now().Add(48*time.Hour)
	early := ca.Issue(t, o)
	dir := t.TempDir()
	writePair(t, dir, a)
	opt, clk := clocked(dir, false)
	r := mustNew(t, opt, zaptest.NewLogger(t))
	writePair(t, dir, early)
	clk.Advance(certs.DefaultInterval)
	if got := r.Leaf().SerialNumber; got.Cmp(a.Cert.SerialNumber) != 0 {
		t.Fatalf("a certificate not valid yet was served")
	}
	clk.Advance(time.Hour)
	if got := r.Leaf().SerialNumber; got.Cmp(early.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %x once valid, want %x", got, early.Cert.SerialNumber)
	}
	if r.Refused() != 1 {
		t.Errorf("Refused = %d, want 1", r.Refused())
	}
}

// TestNewRefusesUnservable: a server does not start with files it could
// not serve.
func TestNewRefusesUnservable(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	for _, tc := range unservable(t, ca) {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files.Write(t, filepath.Join(dir, "tls.crt"), tc.cert)
			files.Write(t, filepath.Join(dir, "tls.key"), tc.key)
			_, err := certs.New(opts(dir, false), zaptest.NewLogger(t))
			var ce *certs.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &ce) || ce.File.Name != tc.wantFile {
				t.Fatalf("New: %v, want %v naming %s", err, tc.want, tc.wantFile)
			}
		})
	}
}

// TestOpenRefusesWithoutHandshakes: once Open, a mismatched key is
// refused when it is written, though no handshake comes.
func TestOpenRefusesWithoutHandshakes(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	a, b := ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())
	dir := t.TempDir()
	writePair(t, dir, a)
	refused := make(chan error, 10)
	o, clk := clocked(dir, false)
	o.OnRefused = func(err error) { refused <- err }
	r := mustNew(t, o, zaptest.NewLogger(t))
	if err := r.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Open(context.Background()); err == nil {
		t.Error("a second Open succeeded")
	}
	files.Write(t, filepath.Join(dir, "tls.key"), b.KeyPEM)
	clk.BlockUntil(t, 1) // the reads' timer
	clk.Advance(certs.DefaultInterval - 1)
	if r.Refused() != 0 {
		t.Fatal("refused before an Interval")
	}
	clk.Advance(1)
	select {
	case err := <-refused:
		if !errors.Is(err, certs.ErrKeyMismatch) {
			t.Errorf("refused with %v, want ErrKeyMismatch", err)
		}
	case <-time.After(patience):
		t.Fatal("a mismatched key was not refused without handshakes")
	}
	for range 2 {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInForceExpiry: the certificate in force expiring is logged once.
func TestInForceExpiry(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	writePair(t, dir, ca.Issue(t, certtest.Server()))
	core, logs := observer.New(zapcore.InfoLevel)
	o, clk := clocked(dir, false)
	r := mustNew(t, o, zap.New(core))
	for range 3 {
		clk.Advance(25 * time.Hour)
		r.Leaf()
	}
	if n := logs.FilterMessageSnippet("in force has expired").Len(); n != 1 {
		t.Errorf("expiry of the certificate in force logged %d times, want 1: %v", n, logs.All())
	}
	if r.Refused() != 0 {
		t.Errorf("Refused = %d: unchanged files are no refusal", r.Refused())
	}
}
