package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// envoyXDSRules is http.yaml's domain as an xDS resource: each client
// address may send rpu api requests a day.
func envoyXDSRules(rpu uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "envoy-e2e-rules", Domain: "envoy-e2e", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "path_class", Value: "api",
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "remote_address",
			RateLimit: &rlsconf.RateLimitPolicy{Name: "api_per_client", Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: rpu}}},
	}}}
}

// TestEnvoyXDSRules runs FastLimit as Envoy Gateway runs it (rules from an
// xDS management server, CONFIG_TYPE=GRPC_XDS_SOTW, on Redis) behind real
// Envoy: the first snapshot's limit holds for a client's requests, and a
// new snapshot's for the requests after FastLimit acknowledged it.
func TestEnvoyXDSRules(t *testing.T) {
	r := redistest.StartServer(t)
	addr, set, cp := startControlPlane(t, nil)
	set("v1", envoyXDSRules(2))
	fl, admin := startEnv(t, map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": addr, "CONFIG_GRPC_XDS_NODE_ID": xdsNodeID,
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "STORE_TIMEOUT": "2s",
	}, true)
	fl.Admin = admin
	if _, err := cp.WaitACK(15*time.Second, "v1"); err != nil {
		t.Fatal(err)
	}
	f := startHTTPFront(t, "xds", fl.GRPC)
	limited := func(rpu int) func(c *envoytest.Client) error {
		return func(c *envoytest.Client) error {
			for i := 1; i <= rpu+1; i++ {
				r, err := f.checked(t, c, "GET", "/")
				if err != nil {
					return err
				}
				if want := http.StatusOK; i <= rpu && r.Code != want || i > rpu && r.Code != http.StatusTooManyRequests {
					return fmt.Errorf("request %d under %d a day: %d", i, rpu, r.Code)
				}
			}
			return nil
		}
	}
	attempt(t, f.front, 24*time.Hour, limited(2))
	set("v2", envoyXDSRules(4))
	if _, err := cp.WaitACK(15*time.Second, "v2"); err != nil {
		t.Fatal(err)
	}
	attempt(t, f.front, 24*time.Hour, limited(4))
	if over := series(t, fl, `fastlimit_rule_over_limit_total{domain="envoy-e2e",rule="api_per_client"}`); over < 2 {
		t.Errorf("FastLimit counted %v hits over api_per_client, want 2", over)
	}
}
