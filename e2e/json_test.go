package e2e_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

func postJSON(t *testing.T, srv *fastlimit, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+srv.HTTP+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestJSONEndpoint(t *testing.T) {
	r := redistest.StartServer(t)
	srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": coreRules}), true, "--redis-url", "redis://"+r.Addr+"/0")
	req := `{"domain":"e2e","descriptors":[{"entries":[{"key":"small","value":"json"}]}]}`
	for i := 1; i <= 3; i++ {
		code, body := postJSON(t, srv, req)
		var resp rls.RateLimitResponse
		if err := protojson.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatalf("hit %d: %v: %s", i, err, body)
		}
		if code != http.StatusOK || resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(3-i) {
			t.Fatalf("hit %d: %d %s", i, code, body)
		}
	}
	if code, body := postJSON(t, srv, req); code != http.StatusTooManyRequests || !strings.Contains(body, "OVER_LIMIT") {
		t.Fatalf("4th hit: %d %s", code, body)
	}
	for name, bad := range map[string]string{
		"not json":       "{",
		"unknown field":  `{"domain":"e2e","nope":1}`,
		"empty domain":   `{"descriptors":[{"entries":[{"key":"small","value":"x"}]}]}`,
		"no descriptors": `{"domain":"e2e"}`,
	} {
		if code, body := postJSON(t, srv, bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, code, body)
		}
	}
	r.Stop()
	if code, body := postJSON(t, srv, req); code != http.StatusServiceUnavailable {
		t.Fatalf("Redis down: %d %s, want 503", code, body)
	}
}

func headerMap(resp *rls.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

func TestResponseHeaders(t *testing.T) {
	rules := files.Dir(t, map[string]string{"e2e.yaml": coreRules + `
  - key: bucket5
    rate_limit: {unit: minute, requests_per_unit: 60, burst: 5, algorithm: token_bucket, name: b5}
  - key: five_min
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 2}
`})
	ctx := ctxTimeout(t, 20*time.Second)
	t.Run("ietf", func(t *testing.T) {
		srv := startServer(t, rules, true, "--response-headers", "ietf")
		resp, err := srv.Client.ShouldRateLimit(ctx, request(desc("small", "h1"), desc("fixed", "h1")))
		if err != nil {
			t.Fatal(err)
		}
		h := headerMap(resp)
		if h["RateLimit-Policy"] != `"small";q=3;w=60` || !strings.HasPrefix(h["RateLimit"], `"small";r=2;t=`) {
			t.Fatalf("most restrictive descriptor not described: %v", h)
		}
		if _, ok := h["Retry-After"]; ok {
			t.Fatalf("Retry-After on OK: %v", h)
		}
		resp, _ = srv.Client.ShouldRateLimit(ctx, request(desc("bucket5", "h1")))
		if h := headerMap(resp); h["RateLimit-Policy"] != `"b5";q=5;w=5` {
			t.Fatalf("token bucket policy: %v", h)
		}
		resp, _ = srv.Client.ShouldRateLimit(ctx, request(desc("five_min", "h1")))
		if h := headerMap(resp); h["RateLimit-Policy"] != `"e2e.five_min";q=2;w=300` {
			t.Fatalf("unit_multiplier policy: %v", h)
		}
		for range 3 {
			resp, _ = srv.Client.ShouldRateLimit(ctx, request(desc("small", "h2")))
		}
		resp, _ = srv.Client.ShouldRateLimit(ctx, request(desc("small", "h2")))
		if h := headerMap(resp); resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || h["Retry-After"] == "" || !strings.Contains(h["RateLimit"], ";r=0;") {
			t.Fatalf("over limit headers: %v", h)
		}
	})
	t.Run("legacy", func(t *testing.T) {
		srv := startServer(t, rules, true, "--response-headers", "legacy", "--limit-remaining-header", "X-Left")
		resp, err := srv.Client.ShouldRateLimit(ctx, request(desc("small", "h3")))
		if err != nil {
			t.Fatal(err)
		}
		if h := headerMap(resp); h["RateLimit-Limit"] != "3" || h["X-Left"] != "2" || h["RateLimit-Reset"] == "" {
			t.Fatalf("legacy headers: %v", h)
		}
	})
	t.Run("global shadow mode and dynamic metadata", func(t *testing.T) {
		srv := startServer(t, rules, true, "--shadow-mode", "--response-dynamic-metadata")
		var resp *rls.RateLimitResponse
		for range 4 {
			var err error
			resp, err = srv.Client.ShouldRateLimit(ctx, request(desc("small", "h4"), desc("fixed", "h4")))
			if err != nil {
				t.Fatal(err)
			}
		}
		if resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("global shadow mode: %v", resp)
		}
		// Every descriptor is listed; the one over its limit is named.
		md := resp.DynamicMetadata.AsMap()
		ds, _ := md["descriptors"].([]any)
		if md["domain"] != "e2e" || len(ds) != 2 {
			t.Fatalf("dynamic metadata: %v", md)
		}
		if e := ds[1].(map[string]any)["entries"].([]any); e[0] != "fixed=h4" {
			t.Fatalf("dynamic metadata entries: %v", md)
		}
		over, _ := md["fastlimit"].(map[string]any)["overLimit"].([]any)
		if len(over) != 1 || over[0].(map[string]any)["index"] != 0.0 {
			t.Fatalf("dynamic metadata overLimit: %v", md)
		}
	})
}
