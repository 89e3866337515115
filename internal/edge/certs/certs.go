// Package certs serves a TLS server's certificate and client CA from PEM
// files, and takes a rotation in without a restart.
package certs

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/clock"
)

// DefaultInterval is how often the files are read again.
const DefaultInterval = time.Second

// Errors of New, Pair and MatchSAN.
var (
	ErrNoCertificate = errors.New("no PEM certificate")
	ErrSANWithoutCA  = errors.New("a client SAN needs a client CA")
	ErrSANMismatch   = errors.New("client certificate does not carry the required SAN")
)

// File is a PEM file and the name errors give it (the setting that named it).
type File struct {
	Name string
	Path string
}

// Error is a file that cannot be read or parsed.
type Error struct {
	File File
	Err  error
}

func (e *Error) Error() string {
	var pe *fs.PathError
	if errors.As(e.Err, &pe) {
		return e.File.Name + ": " + e.Err.Error()
	}
	return e.File.Name + ": " + e.File.Path + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Options say what a Reloader serves.
type Options struct {
	Cert, Key File // the server's certificate chain and private key
	// ClientCA, when its Path is set, requires client certificates,
	// verified against its certificates alone (not the system's roots).
	ClientCA File
	// ClientSAN, when set, is a name the client certificate must carry
	// (MatchSAN). It needs ClientCA.
	ClientSAN  string
	NextProtos []string // ALPN protocols offered ("h2" for gRPC)
	// Interval is how long the files are trusted before they are read
	// again (default DefaultInterval).
	Interval time.Duration
	Clock    Clock // default: the wall clock
	// OnRefused, if set, is called with the *Error once per change of the
	// files to something that cannot be served, on the goroutine that read
	// them; it must not block.
	OnRefused func(error)
}

// Clock is the time a Reloader reads and waits on.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Reloader serves the current certificate and client CA to TLS handshakes.
// It reads the files at most once per Interval (on a handshake, and every
// Interval once Open) and takes a change in if it can be served; any other
// change is refused once (logged, counted, OnRefused) and the files in
// force stay (docs/design.md#certificate-rotation). It is safe for
// concurrent use.
type Reloader struct {
	opts Options
	log  *zap.Logger

	checked atomic.Int64 // when the files were last read, Unix ns
	cur     atomic.Pointer[loaded]
	refused atomic.Int64

	mu      sync.Mutex // serialises reads
	bad     string     // the last refusal, so that it is reported once
	expired bool       // the certificate in force has expired, and that was logged

	cancel context.CancelFunc // set by Open
	done   chan struct{}
}

// loaded is a parsed set of files and the configuration they make.
type loaded struct {
	sum    [sha256.Size]byte
	config *tls.Config
	leaf   *x509.Certificate
}

// New reads the files and checks that the certificate is valid now and
// matches its key; errors name the File at fault. It starts no goroutine.
func New(o Options, log *zap.Logger) (*Reloader, error) {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.ClientSAN != "" && o.ClientCA.Path == "" {
		return nil, fmt.Errorf("%s: %w", o.ClientCA.Name, ErrSANWithoutCA)
	}
	r := &Reloader{opts: o, log: log}
	data, err := r.read()
	if err != nil {
		return nil, err
	}
	now := o.Clock.Now()
	l, err := r.parse(data, digest(data), now)
	if err != nil {
		return nil, err
	}
	r.cur.Store(l)
	r.checked.Store(now.UnixNano())
	return r, nil
}

// Open reads the files every Interval, handshakes or not, until ctx ends
// or Close. Opening an open Reloader is an error.
func (r *Reloader) Open(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return errors.New("certificate reloader is already open")
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	go func(done chan<- struct{}) {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.opts.Clock.After(r.opts.Interval):
				r.current()
			}
		}
	}(r.done)
	return nil
}

// Close stops the reads Open started and waits for them; the Reloader
// keeps serving. It is idempotent.
func (r *Reloader) Close() error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// Refused returns how many changes of the files were refused.
func (r *Reloader) Refused() int64 { return r.refused.Load() }

// ServerConfig returns a configuration that takes the certificate and
// client CA from the Reloader on every handshake.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         slices.Clone(r.opts.NextProtos),
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.current().config, nil },
	}
}

// Leaf returns the certificate in force, reading the files if Interval passed.
func (r *Reloader) Leaf() *x509.Certificate { return r.current().leaf }

func (r *Reloader) current() *loaded {
	now := r.opts.Clock.Now().UnixNano()
	if now-r.checked.Load() >= int64(r.opts.Interval) {
		r.refresh(now)
	}
	return r.cur.Load()
}

// refresh swaps in what the files hold if it changed and can be served.
func (r *Reloader) refresh(now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now-r.checked.Load() < int64(r.opts.Interval) {
		return // another handshake read them meanwhile
	}
	r.checked.Store(now)
	at := time.Unix(0, now)
	cur := r.cur.Load()
	r.checkExpiry(cur, at)
	data, err := r.read()
	if err != nil {
		r.refuse(err)
		return
	}
	sum := digest(data)
	if sum == cur.sum {
		r.bad = ""
		return
	}
	l, err := r.parse(data, sum, at)
	if err != nil {
		r.refuse(err)
		return
	}
	r.bad, r.expired = "", false
	r.cur.Store(l)
	r.log.Info("TLS certificate reloaded", zap.String("file", r.opts.Cert.Path),
		zap.String("subject", l.leaf.Subject.String()), zap.String("serial", l.leaf.SerialNumber.Text(16)),
		zap.Time("not_after", l.leaf.NotAfter))
}

// refuse reports err unless it is the refusal reported last.
func (r *Reloader) refuse(err error) {
	if msg := err.Error(); msg != r.bad {
		r.bad = msg
		r.refused.Add(1)
		r.log.Warn("TLS files changed but cannot be served; the certificate in force stays", zap.Error(err))
		if r.opts.OnRefused != nil {
			r.opts.OnRefused(err)
		}
	}
}

// checkExpiry logs, once, that the certificate in force has expired.
func (r *Reloader) checkExpiry(cur *loaded, now time.Time) {
	if !r.expired && now.After(cur.leaf.NotAfter) {
		r.expired = true
		r.log.Warn("the TLS certificate in force has expired; handshakes fail until a valid one is written",
			zap.String("file", r.opts.Cert.Path), zap.Time("not_after", cur.leaf.NotAfter))
	}
}

// read returns the files' contents: cert, key, client CA.
func (r *Reloader) read() ([3][]byte, error) {
	var out [3][]byte
	for i, f := range []File{r.opts.Cert, r.opts.Key, r.opts.ClientCA} {
		if f.Path == "" {
			continue
		}
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return out, &Error{File: f, Err: err}
		}
		out[i] = b
	}
	return out, nil
}

func digest(data [3][]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, b := range data {
		_, _ = fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// parse builds the configuration of data if it can be served at now.
func (r *Reloader) parse(data [3][]byte, sum [sha256.Size]byte, now time.Time) (*loaded, error) {
	o := r.opts
	pair, err := Pair(o.Cert, o.Key, data[0], data[1], now)
	if err != nil {
		return nil, err
	}
	conf := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   slices.Clone(o.NextProtos),
		Certificates: []tls.Certificate{pair},
	}
	if o.ClientCA.Path != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data[2]) {
			return nil, &Error{File: o.ClientCA, Err: ErrNoCertificate}
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
		// A resumed session would skip verification against a rotated CA.
		conf.SessionTicketsDisabled = true
		if san := o.ClientSAN; san != "" {
			conf.VerifyConnection = func(cs tls.ConnectionState) error { return verifySAN(cs, san) }
		}
	}
	return &loaded{sum: sum, config: conf, leaf: pair.Leaf}, nil
}

// verifySAN checks that the verified client certificate carries san.
func verifySAN(cs tls.ConnectionState, san string) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ErrSANMismatch
	}
	return MatchSAN(cs.VerifiedChains[0][0], san)
}

// MatchSAN returns nil when c carries san: a DNS name or IP address as
// x509.Certificate.VerifyHostname matches them (wildcards included), a URI
// (a SPIFFE ID) or an email address. Otherwise the error wraps ErrSANMismatch.
func MatchSAN(c *x509.Certificate, san string) error {
	if c.VerifyHostname(san) == nil {
		return nil
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return nil
		}
	}
	for _, e := range c.EmailAddresses {
		if strings.EqualFold(e, san) {
			return nil
		}
	}
	return fmt.Errorf("%w %q", ErrSANMismatch, san)
}
