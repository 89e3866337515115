package certs_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/edge/certs"
	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// patience bounds how long a test waits for what must happen.
const patience = 30 * time.Second

// Names the tests give the files, as cmd/server does.
const (
	nameCert = "GRPC_SERVER_TLS_CERT"
	nameKey  = "GRPC_SERVER_TLS_KEY"
	nameCA   = "GRPC_CLIENT_TLS_CACERT"
)

// newClock returns a fake clock at the wall clock's time: certtest's
// certificates are valid now.
func newClock() *clock.Clock { return clock.New(time.Now()) }

func opts(dir string, ca bool) certs.Options {
	o := certs.Options{
		Cert:       certs.File{Name: nameCert, Path: filepath.Join(dir, "tls.crt")},
		Key:        certs.File{Name: nameKey, Path: filepath.Join(dir, "tls.key")},
		NextProtos: []string{"h2"},
	}
	if ca {
		o.ClientCA = certs.File{Name: nameCA, Path: filepath.Join(dir, "ca.crt")}
	}
	return o
}

// clocked returns opts(dir, ca) on a clock of its own.
func clocked(dir string, ca bool) (certs.Options, *clock.Clock) {
	clk := newClock()
	o := opts(dir, ca)
	o.Clock = clk
	return o, clk
}

// mustNew is certs.New, failing t on an error.
func mustNew(t *testing.T, o certs.Options, log *zap.Logger) *certs.Reloader {
	t.Helper()
	r, err := certs.New(o, log)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// writePair writes leaf's certificate and key into dir.
func writePair(t *testing.T, dir string, leaf *certtest.Leaf) {
	t.Helper()
	files.Write(t, filepath.Join(dir, "tls.crt"), leaf.CertPEM)
	files.Write(t, filepath.Join(dir, "tls.key"), leaf.KeyPEM)
}

func TestNewErrors(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	a, b := ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())
	for _, tc := range []struct {
		name   string
		files  map[string][]byte // nil value: file absent
		ca     bool
		san    string
		want   []string // substrings of the error
		wantIs error
	}{
		{name: "cert missing", files: map[string][]byte{"tls.key": a.KeyPEM},
			want: []string{nameCert + ": open ", "tls.crt", "no such file"}, wantIs: os.ErrNotExist},
		{name: "key missing", files: map[string][]byte{"tls.crt": a.CertPEM},
			want: []string{nameKey + ": open ", "tls.key", "no such file"}, wantIs: os.ErrNotExist},
		{name: "cert not PEM", files: map[string][]byte{"tls.crt": []byte("hello"), "tls.key": a.KeyPEM},
			want: []string{nameCert + ": ", "tls.crt: no PEM certificate"}, wantIs: certs.ErrNoCertificate},
		{name: "cert holds a key only", files: map[string][]byte{"tls.crt": a.KeyPEM, "tls.key": a.KeyPEM},
			want: []string{nameCert + ": ", "no PEM certificate"}, wantIs: certs.ErrNoCertificate},
		{name: "key of another certificate", files: map[string][]byte{"tls.crt": a.CertPEM, "tls.key": b.KeyPEM},
			want: []string{nameKey + ": ", "private key does not match public key"}},
		{name: "key not PEM", files: map[string][]byte{"tls.crt": a.CertPEM, "tls.key": []byte("x")},
			want: []string{nameKey + ": ", "tls.key"}},
		{name: "client CA missing", ca: true, files: map[string][]byte{"tls.crt": a.CertPEM, "tls.key": a.KeyPEM},
			want: []string{nameCA + ": open ", "ca.crt"}, wantIs: os.ErrNotExist},
		{name: "client CA not PEM", ca: true,
			files: map[string][]byte{"tls.crt": a.CertPEM, "tls.key": a.KeyPEM, "ca.crt": []byte("nope")},
			want:  []string{nameCA + ": ", "ca.crt: no PEM certificate"}, wantIs: certs.ErrNoCertificate},
		{name: "SAN without client CA", san: "client", files: map[string][]byte{"tls.crt": a.CertPEM, "tls.key": a.KeyPEM},
			want: []string{"a client SAN needs a client CA"}, wantIs: certs.ErrSANWithoutCA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				files.Write(t, filepath.Join(dir, name), data)
			}
			o := opts(dir, tc.ca)
			o.ClientSAN = tc.san
			r, err := certs.New(o, zap.NewNop())
			if err == nil {
				t.Fatalf("New = %v, want an error", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %q is not %v", err, tc.wantIs)
			}
		})
	}
}

// handshake runs a TLS handshake of a client with conf against a server
// with server's configuration over loopback TCP. It returns the server's
// error and the certificate the client was served.
func handshake(t *testing.T, server *tls.Config, conf *tls.Config) (error, *tls.ConnectionState) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	serr := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			serr <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3 clients finish first; answer so that they see
			// the server accepted them.
			_, err = tc.Write([]byte{1})
		}
		serr <- err
	}()
	c, err := tls.Dial("tcp", lis.Addr().String(), conf)
	if err != nil {
		return <-serr, nil
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	st := c.ConnectionState()
	_, _ = c.Read(make([]byte, 1))
	return <-serr, &st
}

func TestClientAuth(t *testing.T) {
	ca, other := certtest.NewCA(t, "ca"), certtest.NewCA(t, "other")
	dir := t.TempDir()
	writePair(t, dir, ca.Issue(t, certtest.Server()))
	files.Write(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	client := func(issuer *certtest.CA, o certtest.Options) []tls.Certificate {
		o.Client = true
		return []tls.Certificate{issuer.Issue(t, o).TLS(t)}
	}
	for _, tc := range []struct {
		name   string
		ca     bool
		san    string
		certs  []tls.Certificate
		wantOK bool
		sanErr bool // refused for the SAN, after the chain verified
	}{
		{name: "TLS only, no client certificate", wantOK: true},
		{name: "mTLS, client certificate", ca: true, certs: client(ca, certtest.Options{CommonName: "c"}), wantOK: true},
		{name: "mTLS, no client certificate", ca: true},
		{name: "mTLS, certificate of another CA", ca: true, certs: client(other, certtest.Options{DNS: []string{"c.example"}})},
		{name: "SAN as DNS name", ca: true, san: "c.example",
			certs: client(ca, certtest.Options{DNS: []string{"x.example", "c.example"}}), wantOK: true},
		{name: "SAN under a wildcard, one label", ca: true, san: "c.ns.example",
			certs: client(ca, certtest.Options{DNS: []string{"*.ns.example"}}), wantOK: true},
		{name: "SAN as IP", ca: true, san: "10.1.2.3",
			certs: client(ca, certtest.Options{IPs: []net.IP{net.ParseIP("10.1.2.3")}}), wantOK: true},
		{name: "SAN as SPIFFE URI", ca: true, san: "spiffe://cluster.local/ns/gw/sa/envoy",
			certs: client(ca, certtest.Options{URIs: []string{"spiffe://cluster.local/ns/gw/sa/envoy"}}), wantOK: true},
		{name: "SAN lacking", ca: true, san: "c.example",
			certs: client(ca, certtest.Options{DNS: []string{"d.example"}}), sanErr: true},
		{name: "SAN only in the common name", ca: true, san: "c.example",
			certs: client(ca, certtest.Options{CommonName: "c.example"}), sanErr: true},
		{name: "SAN, certificate of another CA", ca: true, san: "c.example",
			certs: client(other, certtest.Options{DNS: []string{"c.example"}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts(dir, tc.ca)
			o.ClientSAN = tc.san
			r := mustNew(t, o, zap.NewNop())
			conf := &tls.Config{RootCAs: certtest.Pool(ca), ServerName: "localhost", Certificates: tc.certs, NextProtos: []string{"h2"}}
			serr, st := handshake(t, r.ServerConfig(), conf)
			if ok := serr == nil; ok != tc.wantOK {
				t.Fatalf("server accepted = %v (%v), want %v", ok, serr, tc.wantOK)
			}
			if tc.wantOK && st.NegotiatedProtocol != "h2" {
				t.Errorf("ALPN = %q, want h2", st.NegotiatedProtocol)
			}
			if got := errors.Is(serr, certs.ErrSANMismatch); got != tc.sanErr {
				t.Errorf("server error %v: SAN mismatch = %v, want %v", serr, got, tc.sanErr)
			}
		})
	}
}

func TestMatchSAN(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	leaf := ca.Issue(t, certtest.Options{
		CommonName: "cn.example",
		DNS:        []string{"a.example", "*.w.example"},
		IPs:        []net.IP{net.ParseIP("192.0.2.1"), net.ParseIP("2001:db8::1")},
		URIs:       []string{"spiffe://td/ns/x/sa/y"},
	}).Cert
	for _, tc := range []struct {
		san  string
		want bool
	}{
		{"a.example", true},
		{"A.EXAMPLE", true},
		{"b.w.example", true},
		{"w.example", false},
		{"c.b.w.example", false},
		{"192.0.2.1", true},
		{"2001:db8::1", true},
		{"192.0.2.2", false},
		{"spiffe://td/ns/x/sa/y", true},
		{"spiffe://td/ns/x/sa/z", false},
		{"cn.example", false},
		{"", false},
	} {
		err := certs.MatchSAN(leaf, tc.san)
		if got := err == nil; got != tc.want {
			t.Errorf("MatchSAN(%q) = %v, want match %v", tc.san, err, tc.want)
		}
		if err != nil && !errors.Is(err, certs.ErrSANMismatch) {
			t.Errorf("MatchSAN(%q) = %v, not ErrSANMismatch", tc.san, err)
		}
	}
}

// step is one move of a reload scenario.
type step struct {
	do      func(t *testing.T, dir string)
	advance time.Duration
	want    *certtest.Leaf // the certificate served afterwards
}

func TestReload(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	a, b, c := ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())
	inPlace := func(l *certtest.Leaf) func(*testing.T, string) {
		return func(t *testing.T, dir string) { writePair(t, dir, l) }
	}
	secret := func(l *certtest.Leaf) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			files.Volume(t, dir, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM})
		}
	}
	write := func(name string, data []byte) func(*testing.T, string) {
		return func(t *testing.T, dir string) { files.Write(t, filepath.Join(dir, name), data) }
	}
	remove := func(name string) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sec := certs.DefaultInterval
	for _, tc := range []struct {
		name        string
		start       func(*testing.T, string)
		steps       []step
		wantRefused int // refusals logged and counted
		wantLoads   int // logged reloads
	}{
		{name: "rewrite in place", start: inPlace(a), steps: []step{
			{do: inPlace(b), want: a},               // within the interval: the old one
			{advance: sec - 1, want: a},             // still within it
			{advance: 1, want: b},                   // read again
			{advance: 5 * sec, want: b},             // unchanged files: nothing logged
			{do: inPlace(c), advance: sec, want: c}, // and again
		}, wantLoads: 2},
		{name: "Kubernetes secret ..data swap", start: secret(a), steps: []step{
			{do: secret(b), want: a},
			{advance: sec, want: b},
			{do: secret(c), advance: 2 * sec, want: c},
		}, wantLoads: 2},
		{name: "bad certificate keeps the old one, refused once", start: inPlace(a), steps: []step{
			{do: write("tls.crt", []byte("garbage")), advance: sec, want: a},
			{advance: sec, want: a},
			{advance: sec, want: a},
			{do: inPlace(b), advance: sec, want: b},
		}, wantRefused: 1, wantLoads: 1},
		{name: "certificate before its key: refused at the first read, then taken in", start: inPlace(a), steps: []step{
			{do: write("tls.crt", b.CertPEM), advance: sec, want: a},
			{do: write("tls.key", b.KeyPEM), advance: sec, want: b},
		}, wantRefused: 1, wantLoads: 1},
		{name: "removed files keep the old one, refused once", start: inPlace(a), steps: []step{
			{do: remove("tls.key"), advance: sec, want: a},
			{advance: sec, want: a},
			{do: write("tls.key", a.KeyPEM), advance: sec, want: a},
			{do: inPlace(c), advance: sec, want: c},
		}, wantRefused: 1, wantLoads: 1},
		{name: "back to a bad one after a good one is refused again", start: inPlace(a), steps: []step{
			{do: write("tls.crt", []byte("x")), advance: sec, want: a},
			{advance: sec, want: a},
			{do: inPlace(b), advance: sec, want: b},
			{do: write("tls.crt", []byte("x")), advance: sec, want: b},
			{advance: sec, want: b},
		}, wantRefused: 2, wantLoads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.start(t, dir)
			core, logs := observer.New(zapcore.InfoLevel)
			o, clk := clocked(dir, false)
			r := mustNew(t, o, zap.New(core))
			if got := r.Leaf().SerialNumber; got.Cmp(a.Cert.SerialNumber) != 0 {
				t.Fatalf("start: serial %x, want %x", got, a.Cert.SerialNumber)
			}
			for i, s := range tc.steps {
				if s.do != nil {
					s.do(t, dir)
				}
				clk.Advance(s.advance)
				if got := r.Leaf().SerialNumber; got.Cmp(s.want.Cert.SerialNumber) != 0 {
					t.Fatalf("step %d: serial %x, want %x", i, got, s.want.Cert.SerialNumber)
				}
			}
			if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != tc.wantRefused || r.Refused() != int64(n) {
				t.Errorf("%d refusals logged, %d counted, want %d: %v", n, r.Refused(), tc.wantRefused, logs.All())
			}
			if n := logs.FilterMessage("TLS certificate reloaded").Len(); n != tc.wantLoads {
				t.Errorf("%d reloads logged, want %d", n, tc.wantLoads)
			}
		})
	}
}

// TestServedOnHandshake checks that handshakes get the rotated server
// certificate and client CA.
func TestServedOnHandshake(t *testing.T) {
	ca1, ca2 := certtest.NewCA(t, "ca1"), certtest.NewCA(t, "ca2")
	a, b := ca1.Issue(t, certtest.Server()), ca1.Issue(t, certtest.Server())
	client1 := []tls.Certificate{ca1.Issue(t, certtest.Options{Client: true}).TLS(t)}
	client2 := []tls.Certificate{ca2.Issue(t, certtest.Options{Client: true}).TLS(t)}
	dir := t.TempDir()
	files.Volume(t, dir, map[string][]byte{"tls.crt": a.CertPEM, "tls.key": a.KeyPEM, "ca.crt": ca1.PEM})
	o, clk := clocked(dir, true)
	r := mustNew(t, o, zap.NewNop())
	server := r.ServerConfig()
	dial := func(certs []tls.Certificate) (error, *tls.ConnectionState) {
		return handshake(t, server, &tls.Config{RootCAs: certtest.Pool(ca1), ServerName: "localhost", Certificates: certs})
	}
	if err, st := dial(client1); err != nil || st.PeerCertificates[0].SerialNumber.Cmp(a.Cert.SerialNumber) != 0 {
		t.Fatalf("before rotation: %v", err)
	}
	if err, _ := dial(client2); err == nil {
		t.Fatal("client of ca2 accepted before the CA rotated")
	}
	files.Volume(t, dir, map[string][]byte{"tls.crt": b.CertPEM, "tls.key": b.KeyPEM, "ca.crt": ca2.PEM})
	clk.Advance(certs.DefaultInterval)
	err, st := dial(client2)
	if err != nil {
		t.Fatalf("client of ca2 after rotation: %v", err)
	}
	if st.PeerCertificates[0].SerialNumber.Cmp(b.Cert.SerialNumber) != 0 {
		t.Errorf("served serial %x, want the new %x", st.PeerCertificates[0].SerialNumber, b.Cert.SerialNumber)
	}
	if err, _ := dial(client1); err == nil {
		t.Error("client of ca1 accepted after the CA rotated to ca2")
	}
}

// TestConcurrent rotates while handshakes read the configuration; run
// with -race.
func TestConcurrent(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	leaves := []*certtest.Leaf{ca.Issue(t, certtest.Server()), ca.Issue(t, certtest.Server())}
	dir := t.TempDir()
	files.Volume(t, dir, map[string][]byte{"tls.crt": leaves[0].CertPEM, "tls.key": leaves[0].KeyPEM})
	o, clk := clocked(dir, false)
	r := mustNew(t, o, zap.NewNop())
	get := r.ServerConfig().GetConfigForClient
	var wg sync.WaitGroup
	var handshakes atomic.Int64
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				conf, err := get(&tls.ClientHelloInfo{})
				if err != nil || len(conf.Certificates) != 1 {
					t.Errorf("GetConfigForClient = %v, %v", conf, err)
					return
				}
				clk.Advance(time.Millisecond)
				handshakes.Add(1)
			}
		})
	}
	for i := range 20 {
		l := leaves[i%2]
		files.Volume(t, dir, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM})
		n := handshakes.Load() // handshakes come between rotations
		wait.For(t, patience, func() bool { return handshakes.Load() >= n+8 })
	}
	close(stop)
	wg.Wait()
	last := leaves[1]
	clk.Advance(certs.DefaultInterval)
	if got := r.Leaf().SerialNumber; got.Cmp(last.Cert.SerialNumber) != 0 {
		t.Errorf("serial %x after the last rotation, want %x", got, last.Cert.SerialNumber)
	}
}
