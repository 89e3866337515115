package e2e_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/internal/testing/xdstest"
)

// xdsNodeID is the node id Envoy Gateway gives its rate-limit service.
const xdsNodeID = "envoy-ratelimit"

// startControlPlane starts go-control-plane's own xDS server and snapshot
// cache in the test process, serving TLS when cfg is set, and returns its
// address and a function that makes version, holding res, the snapshot
// of node xdsNodeID. srv records what clients send back (ACKs, NACKs).
func startControlPlane(t testing.TB, cfg *tls.Config) (addr string, set func(version string, res ...*rlsconf.RateLimitConfig), srv *xdstest.Server) {
	t.Helper()
	srv = xdstest.Start(t, cfg)
	return srv.Addr, func(version string, res ...*rlsconf.RateLimitConfig) { srv.Set(t, xdsNodeID, version, res...) }, srv
}

// startEnv starts the binary with no flags, only the environment env
// (and PATH; console logs and no drain unless env says otherwise), as
// Kubernetes starts it. With wantHealthy it waits for /healthcheck to
// answer 200; otherwise it only starts the process. It returns the admin
// listener's address.
func startEnv(t testing.TB, env map[string]string, wantHealthy bool) (*fastlimit, string) {
	t.Helper()
	full := map[string]string{"LOG_FORMAT": "console", "DRAIN": "0s"}
	for k, v := range env {
		full[k] = v
	}
	l := launch{env: full, envOnly: true}
	if !wantHealthy {
		l.wait = waitNone
	}
	f := start(t, l)
	return f, f.Admin
}

// setBad sets version v3: good and a resource name of domain whose rule
// is unlimited and has a unit, which the server refuses; it returns the
// NACK.
func setBad(t *testing.T, set func(string, ...*rlsconf.RateLimitConfig), cp *xdstest.Server,
	good *rlsconf.RateLimitConfig, name, domain string) *discovery.DiscoveryRequest {
	t.Helper()
	set("v3", good, xdstest.Config(name, domain,
		&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, Unlimited: true}}))
	nack, err := cp.WaitNACK(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return nack
}

// xdsRules are the rules of snapshot i: user is limited to rpu a minute.
func xdsRules(rpu uint32) *rlsconf.RateLimitConfig {
	return xdstest.Config("xds-rules", "xds",
		xdstest.Limit("user", "", rlsconf.RateLimitUnit_MINUTE, rpu),
		&rlsconf.RateLimitDescriptor{Key: "free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}})
}

func TestXDSRules(t *testing.T) {
	cases := []struct {
		name       string
		mtls       bool
		forceStart bool
	}{
		{"plaintext", false, false},
		{"mtls forced start", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.StartServer(t)
			env := map[string]string{
				"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
				"CONFIG_GRPC_XDS_NODE_ID":            xdsNodeID,
				"FORCE_START_WITHOUT_INITIAL_CONFIG": fmt.Sprint(tc.forceStart),
				"REDIS_URL":                          "redis://" + r.Addr + "/0",
				// Correctness, not timing, on a loaded machine.
				"STORE_TIMEOUT": "2s",
			}
			var cfg *tls.Config
			if tc.mtls {
				certs := certtest.NewFiles(t, xdstest.ServerName)
				cfg = certs.ServerTLS(true)
				env["CONFIG_GRPC_XDS_SERVER_USE_TLS"] = "true"
				env["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"] = certs.ClientCert
				env["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = certs.ClientKey
				env["CONFIG_GRPC_XDS_SERVER_TLS_CACERT"] = certs.CAFile
				env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = xdstest.ServerName
			}
			addr, set, cp := startControlPlane(t, cfg)
			env["CONFIG_GRPC_XDS_SERVER_URL"] = addr
			ctx := ctxTimeout(t, 60*time.Second)

			if !tc.forceStart {
				set("v1", xdsRules(3))
			}
			srv, admin := startEnv(t, env, true)
			if tc.forceStart {
				// Serving and healthy without rules; requests get the
				// reference's answer until the first snapshot.
				_, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "xds", Descriptors: []*common.RateLimitDescriptor{desc("user", "early")}})
				if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "no rate limit configuration loaded" {
					t.Fatalf("before the first snapshot: %v", err)
				}
				set("v1", xdsRules(3))
			}
			if _, err := cp.WaitACK(15*time.Second, "v1"); err != nil {
				t.Fatal(err)
			}
			call := func(user string) *rls.RateLimitResponse {
				t.Helper()
				resp, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "xds", Descriptors: []*common.RateLimitDescriptor{desc("user", user)}})
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v", err)
				}
				return resp
			}
			for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OK,
				rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
				if got := call("alice").GetOverallCode(); got != want {
					t.Fatalf("hit %d of alice: %v, want %v", i+1, got, want)
				}
			}

			// A new snapshot is in effect in under a second.
			set("v2", xdsRules(10))
			start := time.Now()
			n := 0
			if !wait.True(5*time.Second, func() bool {
				n++
				return call(fmt.Sprintf("poll-%d", n)).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 10
			}) {
				t.Fatal("v2 not in effect after 5 s")
			}
			if took := time.Since(start); took >= time.Second {
				t.Errorf("v2 took %v to take effect", took)
			}
			if got := call("alice").GetOverallCode(); got != rls.RateLimitResponse_OK {
				t.Errorf("alice's 5th hit under 10/minute: %v", got)
			}

			// A bad snapshot is NACKed with the error; v2 keeps deciding.
			nack := setBad(t, set, cp, xdsRules(10), "bad-rules", "other")
			if msg, want := nack.GetErrorDetail().GetMessage(),
				"resource 'bad-rules' descriptor other.k (descriptors[0]): should not specify rate limit unit when unlimited"; msg != want {
				t.Errorf("NACK %q, want %q", msg, want)
			}
			if nack.GetVersionInfo() != "v2" {
				t.Errorf("NACK version %q, want v2", nack.GetVersionInfo())
			}
			if lim := call("bob").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); lim != 10 {
				t.Errorf("after the bad v3: limit %d, want v2's 10", lim)
			}
			for range 6 {
				call("carol")
			}
			if got := call("carol").GetOverallCode(); got != rls.RateLimitResponse_OK {
				t.Errorf("carol's 7th hit under v2's 10/minute: %v", got)
			}

			code, body := scrape.Get(t, "http://"+admin+"/v1/rules")
			if code != http.StatusOK || !strings.Contains(body, "# xds resource xds-rules\n") ||
				!strings.Contains(body, "xds.user: algorithm=fixed_window unit=MINUTE requests_per_unit=10") ||
				!strings.Contains(body, "xds.free: unlimited=true") || strings.Contains(body, "# xds resource bad-rules") ||
				strings.Contains(body, "\nother.") || !strings.Contains(body, "# last failed reload at ") ||
				!strings.Contains(body, "#   resource 'bad-rules' descriptor other.k") {
				t.Errorf("/v1/rules %d:\n%s", code, body)
			}
			_, metrics := scrape.Get(t, "http://"+admin+"/metrics")
			for _, want := range []string{`fastlimit_config_loads_total{result="failure"} 1`, "fastlimit_config_last_reload_successful 0"} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			if logs := srv.logs.String(); !strings.Contains(logs, "rules reload failed") || !strings.Contains(logs, "resource 'bad-rules'") {
				t.Errorf("the failed update is not logged:\n%s", logs)
			}

			// SIGHUP does not end the process: there is nothing to reload.
			if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			wait.For(t, 5*time.Second, func() bool { return strings.Contains(srv.logs.String(), "nothing to reload") })
			if lim := call("dave").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); lim != 10 {
				t.Errorf("after SIGHUP: limit %d", lim)
			}
		})
	}
}

// TestXDSWaitsForRules starts the binary without a snapshot and without a
// forced start: like the reference, it does not listen until rules come.
func TestXDSWaitsForRules(t *testing.T) {
	addr, set, _ := startControlPlane(t, nil)
	srv, _ := startEnv(t, map[string]string{
		"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_GRPC_XDS_SERVER_URL": addr, "CONFIG_GRPC_XDS_NODE_ID": xdsNodeID,
	}, false)
	// The client asks for rules, and the server waits for them.
	wait.For(t, 15*time.Second, func() bool { return strings.Contains(srv.logs.String(), "rules come from an xDS server") })
	if resp, err := http.Get("http://" + srv.HTTP + "/healthcheck"); err == nil {
		resp.Body.Close()
		t.Fatalf("listening before the first rules: %d", resp.StatusCode)
	}
	set("v1", xdsRules(1))
	wait.For(t, 15*time.Second, func() bool {
		resp, err := http.Get("http://" + srv.HTTP + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ctx := ctxTimeout(t, 30*time.Second)
	resp, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "xds", Descriptors: []*common.RateLimitDescriptor{desc("user", "u")}})
	if err != nil || resp.GetOverallCode() != rls.RateLimitResponse_OK {
		t.Fatalf("%v %v", resp, err)
	}
}

// TestXDSConfigTypeRefused checks that an unknown CONFIG_TYPE stops the
// start with a message naming the variable.
func TestXDSConfigTypeRefused(t *testing.T) {
	out, err := runToExit(map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA", "ADMIN_ADDR": ""})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("exit %v; output:\n%s", err, out)
	}
	if !strings.Contains(out, "CONFIG_TYPE") || !strings.Contains(out, "GRPC_XDS_DELTA") {
		t.Errorf("output does not name CONFIG_TYPE:\n%s", out)
	}
}

// egOverlayRules is the RateLimitConfig Envoy Gateway sends for
// examples/envoy-gateway: each x-user-id 3 a minute, on the route of the
// Gateway's listener default/eg/http.
func egOverlayRules() *rlsconf.RateLimitConfig {
	const route, rule = "httproute/default/echo/rule/0/match/0/www_example_com", "default/echo-global-limit/rule/0"
	return &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: route, Value: route, Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: rule, Value: rule, Descriptors: []*rlsconf.RateLimitDescriptor{
				xdstest.Limit("rule-0-match-0", "", rlsconf.RateLimitUnit_MINUTE, 3),
			},
		}},
	}}}
}

// exampleOverlay is the overlay of examples/envoy-gateway/overlay.yaml's
// ConfigMap.
func exampleOverlay(t *testing.T) string {
	t.Helper()
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(files.Read(t, "../examples/envoy-gateway/overlay.yaml"), &cm); err != nil || cm.Data["overlay.yaml"] == "" {
		t.Fatalf("the example's overlay: %v", err)
	}
	return cm.Data["overlay.yaml"]
}

// TestXDSOverlay starts the binary on an Envoy Gateway snapshot with
// RULES_OVERLAY: an empty overlay decides as today (a fixed window: the
// 4th hit of a user in a minute is refused), and the example's, written
// in while it runs, makes the user's limit a token bucket holding 10.
func TestXDSOverlay(t *testing.T) {
	addr, set, cp := startControlPlane(t, nil)
	set("v1", egOverlayRules())
	overlay := filepath.Join(t.TempDir(), "overlay.yaml")
	files.Write(t, overlay, "domains: []\n")
	srv, admin := startEnv(t, map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": addr, "CONFIG_GRPC_XDS_NODE_ID": xdsNodeID,
		"RULES_OVERLAY": overlay,
	}, true)
	if _, err := cp.WaitACK(15*time.Second, "v1"); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, time.Minute)
	hits := func(user string, n int) (ok int) {
		t.Helper()
		for range n {
			resp, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*common.RateLimitDescriptor{
				desc("httproute/default/echo/rule/0/match/0/www_example_com", "httproute/default/echo/rule/0/match/0/www_example_com",
					"default/echo-global-limit/rule/0", "default/echo-global-limit/rule/0", "rule-0-match-0", user)}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() == rls.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}
	if ok := hits("alice", 5); ok != 3 {
		t.Errorf("without extensions, %d of 5 hits in a minute passed, want 3 (a fixed window of 3)", ok)
	}

	files.Write(t, overlay, exampleOverlay(t))
	var rulesPage string
	if !wait.True(15*time.Second, func() bool {
		_, rulesPage = scrape.Get(t, "http://"+admin+"/v1/rules")
		return strings.Contains(rulesPage, "algorithm=token_bucket")
	}) {
		_, metrics := scrape.Get(t, "http://"+admin+"/metrics")
		var loads []string
		for _, l := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(l, "fastlimit_config_") {
				loads = append(loads, l)
			}
		}
		t.Fatalf("the overlay written in place did not take effect in 15 s; /v1/rules:\n%s\nconfig series:\n%s\noverlay:\n%s",
			rulesPage, strings.Join(loads, "\n"), files.Read(t, overlay))
	}
	if ok := hits("bob", 12); ok != 10 {
		t.Errorf("with the example's overlay, %d of 12 hits passed at once, want 10 (a token bucket holding 10)", ok)
	}
	if _, body := scrape.Get(t, "http://"+admin+"/metrics"); !strings.Contains(body, "fastlimit_config_overlay_unmatched 0") {
		t.Error("/metrics lacks fastlimit_config_overlay_unmatched 0")
	}
}
