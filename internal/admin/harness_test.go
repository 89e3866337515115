package admin_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/server"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// opsRules are a window, a named sliding window that replaces another,
// a shadowed bucket, and a rule of three limits, the third of which the
// sliding window replaces.
//
//go:embed testdata/ops.yaml
var opsRules string

const adminRules = `
domain: adm
descriptors:
  - key: win
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: odd
    value: "a,b=c"
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 7, name: oddity}
`

// patience bounds the waits for what must happen.
const patience = 15 * time.Second

// replica is a server (package server) whose admin API the tests ask.
type replica struct {
	*server.Server
}

// testServer opens a server on loopback ports chosen by the kernel, with
// the memory store and rules from files, and closes it when the test
// ends; it returns the server and its rules directory.
func testServer(t *testing.T, rules map[string]string, args ...string) (*replica, string) {
	t.Helper()
	dir := files.Dir(t, rules)
	return testServerOn(t, dir, zaptest.NewLogger(t), args...), dir
}

func testServerOn(t *testing.T, dir string, log *zap.Logger, args ...string) *replica {
	t.Helper()
	o, err := settings.Parse("test", append([]string{"--config", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--admin-addr", "127.0.0.1:0", "--drain", "0s"}, args...), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(o, log, prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background()); err != nil {
		_ = s.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &replica{s}
}

// decide asks the server to decide a request of one descriptor of
// key, value pairs, through POST /json.
func (r *replica) decide(t *testing.T, domain string, kv ...string) {
	t.Helper()
	type entry struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	var es []entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, entry{kv[i], kv[i+1]})
	}
	body, err := json.Marshal(map[string]any{"domain": domain, "descriptors": []any{map[string]any{"entries": es}}})
	if err != nil {
		t.Fatal(err)
	}
	code, out := call(t, nil, http.MethodPost, "http://"+r.HTTPAddr()+"/json", string(body))
	if code != http.StatusOK && code != http.StatusTooManyRequests {
		t.Fatalf("POST /json %s: %d %s", body, code, out)
	}
}

// hash is the hash of the rules in force, as /v1/status says.
func (r *replica) hash(t *testing.T) string {
	t.Helper()
	_, out := call(t, nil, http.MethodGet, "http://"+r.AdminAddr()+"/v1/status", "")
	return decode[admin.Status](t, out).Rules.Hash
}

// call sends method to url with body and the headers given as name,
// value pairs, and returns the status and body. A POST with a body is
// JSON unless the headers say otherwise.
func call(t *testing.T, c *http.Client, method, url, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := c.Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v
}

// grpcClient dials addr without TLS; closed when the test ends.
func grpcClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// second is the second of two values: call's body.
func second[A, B any](_ A, b B) B { return b }
