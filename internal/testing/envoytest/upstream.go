package envoytest

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Upstream is a plain HTTP server for Envoy to route to: it answers 200
// "ok" unless given a handler, and keeps the headers of the requests it saw.
type Upstream struct {
	// Addr is its loopback address.
	Addr string
	mu   sync.Mutex
	seen []http.Header
}

// StartUpstream serves h (nil: 200 "ok") on a free loopback port until t
// ends.
func StartUpstream(t testing.TB, h http.Handler) *Upstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &Upstream{Addr: l.Addr().String()}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	})}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("upstream: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return u
}

// Seen returns the headers of the requests the upstream received, in
// order.
func (u *Upstream) Seen() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}
