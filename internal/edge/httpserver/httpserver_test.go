package httpserver_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/edge/httpserver"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// patience bounds every wait for something that must happen.
const patience = 10 * time.Second

func serve(t *testing.T, o httpserver.Options) *httpserver.Server {
	t.Helper()
	s, err := httpserver.Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// closedByServer waits (patience at most) for the server to close c.
func closedByServer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection was still open after %v", what, patience)
	}
}

// TestIdleConnectionClosed: a keep-alive connection with no request is
// closed after Idle.
func TestIdleConnectionClosed(t *testing.T) {
	s := serve(t, httpserver.Options{Idle: 100 * time.Millisecond})
	c := loopback.Dial(t, s.Addr().String())
	getOK(t, c, "first request")
	closedByServer(t, c, "idle keep-alive")
}

// TestSlowHeadersClosed: headers that never end are cut off after
// ReadHeader.
func TestSlowHeadersClosed(t *testing.T) {
	s := serve(t, httpserver.Options{ReadHeader: 100 * time.Millisecond})
	c := loopback.Dial(t, s.Addr().String())
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	closedByServer(t, c, "unfinished headers")
}

// TestHeaderLimit: headers over MaxHeaderBytes are refused.
func TestHeaderLimit(t *testing.T) {
	s := serve(t, httpserver.Options{MaxHeaderBytes: 1 << 10})
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr().String()+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 8<<10))
	resp, err := (&http.Client{Timeout: patience}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("8 KiB of headers over a 1 KiB limit: %d", resp.StatusCode)
	}
}

// TestMaxConns: connections past MaxConns are closed at once and counted;
// the ones held are served.
func TestMaxConns(t *testing.T) {
	s := serve(t, httpserver.Options{MaxConns: 2})
	held := []net.Conn{loopback.Dial(t, s.Addr().String()), loopback.Dial(t, s.Addr().String())}
	wait.True(patience, func() bool { return s.Stats().Open >= 2 })
	extra, err := net.DialTimeout("tcp", s.Addr().String(), patience)
	if err == nil {
		defer extra.Close()
		closedByServer(t, extra, "a connection past the cap")
	}
	if st := s.Stats(); st.Open != 2 || st.Refused != 1 {
		t.Fatalf("stats %+v, want 2 open and 1 refused", st)
	}
	for _, c := range held {
		_ = c.SetDeadline(time.Now().Add(patience))
		getOK(t, c, "a held connection")
	}
}

// getOK sends GET / on c and fails t unless it answers 200.
func getOK(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %v %v", what, resp, err)
	}
	_ = resp.Body.Close()
}
