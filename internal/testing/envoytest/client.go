package envoytest

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// Client sends HTTP/1.1 requests to an Envoy listener from one loopback
// source address. Envoy's remote_address descriptor is that address (with
// use_remote_address), so that each client of a test, or each attempt of
// one, is a client address of its own with counters of its own: Linux
// routes all of 127.0.0.0/8 to the loopback interface.
type Client struct {
	// Listener is the Envoy listener's address.
	Listener string
	// Source is the client's address, "127.0.0.1" unless set.
	Source string
	c      *http.Client
}

// NewClient returns a client of listener from source ("" for 127.0.0.1).
// Its idle connections close when t ends.
func NewClient(t testing.TB, listener, source string) *Client {
	t.Helper()
	if source == "" {
		source = "127.0.0.1"
	}
	ip := net.ParseIP(source)
	if ip == nil || !ip.IsLoopback() {
		t.Fatalf("client source %q is no loopback address", source)
	}
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{Listener: listener, Source: source, c: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Response is what a request through Envoy got: its status, headers and
// body, read whole.
type Response struct {
	Code   int
	Header http.Header
	Body   string
}

// Do sends method path with the headers in hdr ("Name: value" strings) and
// returns the response; a transport error fails t.
func (c *Client) Do(t testing.TB, method, path string, hdr ...string) Response {
	t.Helper()
	r, err := c.Try(method, path, hdr...)
	if err != nil {
		t.Fatalf("%s %s from %s through Envoy: %v", method, path, c.Source, err)
	}
	return r
}

// Try is Do returning the transport's error instead of failing a test.
func (c *Client) Try(method, path string, hdr ...string) (Response, error) {
	req, err := http.NewRequest(method, "http://"+c.Listener+path, nil)
	if err != nil {
		return Response{}, err
	}
	for _, h := range hdr {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return Response{}, fmt.Errorf("header %q is not Name: value", h)
		}
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return Response{Code: resp.StatusCode, Header: resp.Header, Body: string(body)}, err
}

// Codes sends method path n times, one after another, and counts the
// status codes.
func (c *Client) Codes(t testing.TB, n int, method, path string, hdr ...string) Codes {
	t.Helper()
	codes := Codes{}
	for range n {
		codes[c.Do(t, method, path, hdr...).Code]++
	}
	return codes
}

// Codes counts responses by status code.
type Codes map[int]int

// String lists the codes in order: "200×10 429×1".
func (c Codes) String() string {
	var b strings.Builder
	for _, code := range slices.Sorted(maps.Keys(c)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d×%d", code, c[code])
	}
	return b.String()
}
