package xds_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/edge/certs"
	"github.com/fastlimit/fastlimit/internal/source/xds"
	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/xdstest"
)

// TestClientCertRotationRefused rotates the mTLS client certificate files
// to ones that cannot be used: the Client refuses them (OnCertRefused,
// once), reconnects with the last good certificate and keeps receiving;
// a good rotation after is used.
func TestClientCertRotationRefused(t *testing.T) {
	now := time.Now()
	other := certtest.NewCA(t, "other")
	expiredOpts := certtest.Options{CommonName: "client", Client: true, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Minute)}
	earlyOpts := certtest.Options{CommonName: "client", Client: true, NotBefore: now.Add(time.Hour), NotAfter: now.Add(48 * time.Hour)}
	expired, early := other.Issue(t, expiredOpts), other.Issue(t, earlyOpts)
	for _, tc := range []struct {
		name      string
		cert, key func(c *certtest.Files) []byte
		want      error
	}{
		{"expired", func(*certtest.Files) []byte { return expired.CertPEM }, func(*certtest.Files) []byte { return expired.KeyPEM }, certs.ErrExpired},
		{"not valid yet", func(*certtest.Files) []byte { return early.CertPEM }, func(*certtest.Files) []byte { return early.KeyPEM }, certs.ErrNotYetValid},
		{"key of another certificate", nil, func(c *certtest.Files) []byte {
			_, key := c.Issue(t, "client2", certtest.Options{Client: true})
			return files.Read(t, key)
		}, certs.ErrKeyMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := certtest.NewFiles(t, xdstest.ServerName)
			srv := xdstest.Start(t, cs.ServerTLS(true))
			srv.Set(t, node, "v1", xdstest.Config("a", "alpha"))
			var mu sync.Mutex
			var refused []error
			opts, clk := fast(srv.Addr)
			opts.TLS = &xds.TLS{CAFile: cs.CAFile, CertFile: cs.ClientCert, KeyFile: cs.ClientKey}
			opts.OnCertRefused = func(err error) {
				mu.Lock()
				defer mu.Unlock()
				refused = append(refused, err)
			}
			s := newSink()
			open(t, opts, s)
			s.waitFor(t, "alpha")
			good, goodKey := files.Read(t, cs.ClientCert), files.Read(t, cs.ClientKey)

			if tc.cert != nil {
				files.Write(t, cs.ClientCert, tc.cert(cs))
			}
			files.Write(t, cs.ClientKey, tc.key(cs))
			for i, domain := range []string{"beta", "gamma"} { // two reconnects
				srv.Stop()
				srv.Set(t, node, xdstest.Version(i+2), xdstest.Config("a", domain))
				srv.Resume(t)
				reconnect(t, clk)
				s.waitFor(t, domain)
			}
			mu.Lock()
			got := refused
			mu.Unlock()
			if len(got) != 1 || !errors.Is(got[0], tc.want) {
				t.Fatalf("refusals %v, want one %v", got, tc.want)
			}

			// A good rotation is used: the server accepts the new pair.
			files.Write(t, cs.ClientCert, good)
			files.Write(t, cs.ClientKey, goodKey)
			srv.Stop()
			srv.Set(t, node, "v9", xdstest.Config("a", "delta"))
			srv.Resume(t)
			reconnect(t, clk)
			s.waitFor(t, "delta")
		})
	}
}

// TestClientCertRefusedWithoutLastGood: with no good certificate read
// before, a bad one is an error: nothing connects.
func TestClientCertRefusedWithoutLastGood(t *testing.T) {
	cs := certtest.NewFiles(t, xdstest.ServerName)
	_, otherKey := cs.Issue(t, "client2", certtest.Options{Client: true})
	_, err := (&xds.TLS{CAFile: cs.CAFile, CertFile: cs.ClientCert, KeyFile: otherKey}).Config()
	if !errors.Is(err, certs.ErrKeyMismatch) {
		t.Fatalf("Config with another certificate's key: %v, want ErrKeyMismatch", err)
	}
}
