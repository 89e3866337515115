package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// TestStalledRequestIsCut: a client that sends headers and part of a body,
// then stalls, loses its connection within the read timeout, on the HTTP
// and on the admin listener.
func TestStalledRequestIsCut(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	dir := files.Dir(t, map[string]string{"adm.yaml": adminRules})
	s := newServer(t, zaptest.NewLogger(t), loopbackArgs(dir)...)
	if d := s.httpOpts; d.Read <= 0 || d.Write <= 0 || d.Idle <= 0 || d.MaxHeaderBytes <= 0 || d.MaxConns <= 0 ||
		s.adminOpts.Write < time.Minute {
		t.Fatalf("default bounds %+v, admin %+v", s.httpOpts, s.adminOpts)
	}
	s.httpOpts.Read, s.httpOpts.ReadHeader = readTimeout, readTimeout
	s.adminOpts.Read, s.adminOpts.ReadHeader = readTimeout, readTimeout
	if err := s.Open(context.Background()); err != nil {
		_ = s.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	cases := []struct {
		name, addr, head string
	}{
		{"http /json", s.HTTPAddr(), "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"domain\":"},
		{"admin /metrics", s.AdminAddr(), "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"},
		{"http headers", s.HTTPAddr(), "GET /ready HTTP/1.1\r\nHost: x\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.head); err != nil {
				t.Fatal(err)
			}
			// The client stalls. Without a read timeout the server would
			// wait for the rest forever; allow it plenty on a loaded
			// machine.
			start := time.Now()
			if err := c.SetReadDeadline(start.Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(c)
			var got strings.Builder
			_, err = io.Copy(&got, r)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the server still holds the stalled connection after 10 s; read %q", got.String())
			}
			if took := time.Since(start); took < readTimeout/2 {
				t.Fatalf("connection cut after %s, before the read timeout", took)
			}
		})
	}
}

// TestJSONBodyLimit: /json reads at most 4 MiB of body and answers 413
// past it.
func TestJSONBodyLimit(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--drain", "0s")
	url := "http://" + s.HTTPAddr() + "/json"
	ok := `{"domain":"adm","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	for _, tc := range []struct {
		name string
		body string
		want int
	}{
		{"small", ok, http.StatusOK},
		// Valid JSON padded with whitespace: only the size is wrong.
		{"past 4 MiB", ok + strings.Repeat(" ", 4<<20), http.StatusRequestEntityTooLarge},
	} {
		resp, err := http.Post(url, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

// TestDrainDefault: by default a stopping server fails readiness for 5 s
// before its listeners close, so that load balancers see it; a server
// whose Open failed never served and stops at once.
func TestDrainDefault(t *testing.T) {
	o := parseSettings(t, nil, func(string) string { return "" })
	if o.Drain != 5*time.Second {
		t.Fatalf("--drain defaults to %s", o.Drain)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := files.Dir(t, map[string]string{"adm.yaml": adminRules})
	s := newServer(t, zaptest.NewLogger(t), loopbackArgs(dir, "--admin-addr", taken.Addr().String())...)
	if err := s.Open(context.Background()); err == nil {
		t.Fatal("Open on a taken admin address succeeded")
	}
	start := time.Now()
	_ = s.Close(context.Background())
	if took := time.Since(start); took >= o.Drain {
		t.Fatalf("Close after a failed Open took %s: it drained", took)
	}
}
