package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// metadataRules give each client address two api requests a day, and the
// rule's metadata tier: gold.
const metadataRules = `domain: envoy-e2e
descriptors:
  - key: path_class
    value: api
    descriptors:
      - key: remote_address
        metadata: {tier: gold}
        rate_limit: {name: api_per_client, unit: day, requests_per_unit: 2}
`

// TestEnvoyDynamicMetadata: the dynamic_metadata FastLimit answers with
// (--response-dynamic-metadata) reaches Envoy, which stores it under
// envoy.filters.http.ratelimit for its access log: the passing requests
// log the rule's metadata (tier), the 429 logs which rule refused it
// (fastlimit.overLimit) and no tier, since metadata merges only the
// descriptors that passed.
func TestEnvoyDynamicMetadata(t *testing.T) {
	fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": metadataRules}), "--response-dynamic-metadata")
	f := startHTTPFront(t, "metadata", fl.GRPC)
	var client string
	attempt(t, f.front, 24*time.Hour, func(c *envoytest.Client) error {
		client = c.Source
		for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
			r, err := f.checked(t, c, "GET", "/")
			if err != nil {
				return err
			}
			if r.Code != want {
				return fmt.Errorf("request %d: %d, want %d", i+1, r.Code, want)
			}
		}
		return nil
	})
	// Envoy writes a request's access log line when the stream ends,
	// after the client has its response, and flushes it within 100 ms
	// (startFront).
	var lines []map[string]any
	if !wait.True(30*time.Second, func() bool {
		lines = nil
		for _, l := range f.accessLines(t) {
			if l["client"] == client {
				lines = append(lines, l)
			}
		}
		return len(lines) == 3
	}) {
		t.Fatalf("client %s: %d access log lines, want 3: %v", client, len(lines), lines)
	}
	over := fmt.Sprintf(`[{"entries":["path_class=api","remote_address=%s"],"index":0,"name":"api_per_client","rule":"envoy-e2e.path_class_api.remote_address"}]`, client)
	for i, l := range lines {
		o, _ := json.Marshal(l["over_limit"])
		wantTier, wantOver := any("gold"), "null"
		if i == 2 {
			wantTier, wantOver = nil, over
		}
		if l["tier"] != wantTier || string(o) != wantOver {
			t.Errorf("access log line %d (status %v): tier %v, over_limit %s; want %v, %s", i+1, l["status"], l["tier"], o, wantTier, wantOver)
		}
	}
}
