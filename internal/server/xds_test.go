package server

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	zapobserver "go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/source/xds"
	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/internal/testing/xdstest"
)

// xdsServer opens a server whose rules come from srv, with options args;
// it closes when the test ends. Open runs on its own goroutine: the
// returned channel yields its error.
func xdsServer(t *testing.T, srv *xdstest.Server, log *zap.Logger, args ...string) (*Server, <-chan error) {
	t.Helper()
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--config-type", "GRPC_XDS_SOTW", "--xds-server", srv.Addr, "--xds-node-id", xdsNode,
		"--xds-backoff-initial", "20ms", "--xds-connect-retry-interval", "50ms"}, args...)
	s := newServer(t, log, args...)
	ctx, cancel := context.WithCancel(context.Background())
	opened := make(chan error, 1)
	go func() { opened <- s.Open(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s, opened
}

func waitOpen(t *testing.T, opened <-chan error) {
	t.Helper()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open did not return")
	}
}

// decideCode sends one hit of key=value to domain d and returns the
// overall code, or the gRPC error.
func decideCode(t *testing.T, s *Server, d, key, value string) (rlspb.RateLimitResponse_Code, error) {
	t.Helper()
	resp, err := s.service.ShouldRateLimit(context.Background(), rlsRequest(d, key, value))
	return resp.GetOverallCode(), err
}

// waitHash waits until rules are in force whose hash differs from
// differentFrom, and returns it.
func waitHash(t *testing.T, s *Server, differentFrom string) string {
	t.Helper()
	var hash string
	wait.For(t, 10*time.Second, func() bool {
		cur := s.rules.Current()
		if cur == nil || cur.Hash == differentFrom {
			return false
		}
		hash = cur.Hash
		return true
	})
	return hash
}

func TestXDSRulesServed(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(t, xdsNode, "v1", xdstest.Config("rl-x", "x", xdstest.Limit("k", "", rlsconf.RateLimitUnit_MINUTE, 2)))
	core, logs := zapobserver.New(zapcore.InfoLevel)
	s, opened := xdsServer(t, srv, zap.New(core))
	waitOpen(t, opened)
	if s.reload != nil {
		t.Error("the rules directory is watched in xDS mode")
	}

	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		if code, err := decideCode(t, s, "x", "k", "a"); err != nil || code != want {
			t.Fatalf("hit %d: %v %v, want %v", i, code, err, want)
		}
	}
	code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/rules")
	if code != http.StatusOK || !strings.Contains(body, "# 1 xds resources") || !strings.Contains(body, "# xds resource rl-x\n") ||
		!strings.Contains(body, "x.k: algorithm=fixed_window unit=MINUTE requests_per_unit=2") {
		t.Errorf("/rlconfig %d:\n%s", code, body)
	}
	if n := logs.FilterMessage("rules reloaded").FilterField(zap.String(logCause, causeXDS)).Len(); n != 1 {
		t.Errorf("%d 'rules reloaded' lines with cause xds; all: %v", n, logs.All())
	}

	// A new snapshot is swapped in.
	h1 := s.rules.Current().Hash
	srv.Set(t, xdsNode, "v2", xdstest.Config("rl-x", "x", xdstest.Limit("k", "", rlsconf.RateLimitUnit_MINUTE, 100)))
	h2 := waitHash(t, s, h1)
	if code, err := decideCode(t, s, "x", "k", "a"); err != nil || code != rlspb.RateLimitResponse_OK {
		t.Fatalf("after v2: %v %v", code, err)
	}
	if _, err := srv.WaitACK(10*time.Second, "v2"); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, s.registry, "fastlimit_config_info", "hash", h2); got != 1 {
		t.Errorf("fastlimit_config_info{hash=%s} = %v", h2, got)
	}

	// A bad snapshot is NACKed with the error; the rules stay.
	srv.Set(t, xdsNode, "v3",
		xdstest.Config("rl-x", "x", xdstest.Limit("k", "", rlsconf.RateLimitUnit_MINUTE, 1)),
		xdstest.Config("rl-y", "y", &rlsconf.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}))
	nack, err := srv.WaitNACK(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := nack.GetErrorDetail().GetMessage(), "resource 'rl-y' descriptor y.k_v (descriptors[0]): missing rate limit unit"; got != want {
		t.Errorf("NACK %q, want %q", got, want)
	}
	if s.rules.Current().Hash != h2 {
		t.Error("a bad snapshot replaced the rules")
	}
	if code, err := decideCode(t, s, "x", "k", "a"); err != nil || code != rlspb.RateLimitResponse_OK {
		t.Fatalf("after the bad v3, v2's 100/minute: %v %v", code, err)
	}
	if got := metricValue(t, s.registry, "fastlimit_config_loads_total", "result", "failure"); got != 1 {
		t.Errorf("failed loads %v, want 1 (a resent snapshot is not counted again)", got)
	}
	if got := metricValue(t, s.registry, "fastlimit_config_last_reload_successful"); got != 0 {
		t.Errorf("last_reload_successful %v", got)
	}
	failed := logs.FilterMessage("rules reload failed; the rules in force stay").All()
	if len(failed) != 1 || !strings.Contains(failed[0].ContextMap()[logErrors].([]any)[0].(string), "resource 'rl-y'") {
		t.Errorf("failure logs: %v", failed)
	}
}

func TestXDSWaitsForFirstRules(t *testing.T) {
	srv := xdstest.Start(t, nil)
	s, opened := xdsServer(t, srv, zaptest.NewLogger(t))
	select {
	case err := <-opened:
		t.Fatalf("Open returned %v without rules", err)
	case <-time.After(300 * time.Millisecond):
	}
	// A bad first snapshot is NACKed and waited past.
	srv.Set(t, xdsNode, "v1", xdstest.Config("r", "", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1)))
	if _, err := srv.WaitNACK(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-opened:
		t.Fatalf("Open returned %v after a bad snapshot", err)
	case <-time.After(100 * time.Millisecond):
	}
	if s.grpcLis != nil {
		t.Error("listening before the first rules")
	}
	srv.Set(t, xdsNode, "v2", xdstest.Config("r", "d", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1)))
	waitOpen(t, opened)
	if code, err := decideCode(t, s, "d", "k", "v"); err != nil || code != rlspb.RateLimitResponse_OK {
		t.Fatalf("%v %v", code, err)
	}
}

func TestXDSWaitEndsWithContext(t *testing.T) {
	srv := xdstest.Start(t, nil)
	s := newServer(t, zaptest.NewLogger(t), "--config-type", "grpc_xds_sotw", "--xds-server", srv.Addr,
		"--admin-addr", "")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.Open(ctx)
	if err == nil || !strings.Contains(err.Error(), "wait for the first rules from the xDS server") {
		t.Errorf("Open: %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestXDSForceStart(t *testing.T) {
	srv := xdstest.Start(t, nil)
	s, opened := xdsServer(t, srv, zaptest.NewLogger(t), "--xds-start-without-rules")
	waitOpen(t, opened)

	// Before the first rules: the reference's answer and status.
	_, err := decideCode(t, s, "d", "k", "v")
	if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "no rate limit configuration loaded" {
		t.Errorf("before rules: %v", err)
	}
	if got := metricValue(t, s.registry, "fastlimit_requests_total", "code", "UNKNOWN"); got != 1 {
		t.Errorf("requests_total{code=UNKNOWN} = %v", got)
	}
	if got := metricValue(t, s.registry, "fastlimit_store_errors_total"); got != 0 {
		t.Errorf("store errors %v", got)
	}
	if code, body := scrape.Get(t, "http://"+s.HTTPAddr()+"/healthcheck"); code != http.StatusOK {
		t.Errorf("/healthcheck %d %s before the first rules of a forced start", code, body)
	}
	if code, _ := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/rules"); code != http.StatusServiceUnavailable {
		t.Errorf("/v1/rules %d before rules", code)
	}
	if code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/rlconfig"); code != http.StatusOK || body != "" {
		t.Errorf("/rlconfig %d %q before rules, want 200 and nothing, as the reference", code, body)
	}
	resp, err := http.Post("http://"+s.HTTPAddr()+"/json", "application/json",
		strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no rate limit configuration loaded") {
		t.Errorf("/json %d %s", resp.StatusCode, body)
	}

	srv.Set(t, xdsNode, "v1", xdstest.Config("r", "d", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1)))
	waitHash(t, s, "")
	if code, err := decideCode(t, s, "d", "k", "v"); err != nil || code != rlspb.RateLimitResponse_OK {
		t.Fatalf("after rules: %v %v", code, err)
	}
	if code, err := decideCode(t, s, "d", "k", "v"); err != nil || code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second hit: %v %v", code, err)
	}
}

// TestXDSClientOptions: the reference's xDS variables give the xDS
// client's options.
func TestXDSClientOptions(t *testing.T) {
	certs := certtest.NewFiles(t, xdstest.ServerName)
	env := map[string]string{
		"CONFIG_TYPE": "grpc_xds_sotw", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_NODE_METADATA": "a=1,b=x=y,junk",
		"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "7s",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "Authorization:Bearer a:b,x-id:7",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":            "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": certs.ClientCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": certs.ClientKey, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": certs.CAFile,
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN":      "eg.test",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "30s",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2", "XDS_CLIENT_BACKOFF_JITTER": "false", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1048576",
	}
	got, err := settings.Parse("test", nil, func(k string) string { return env[k] }, io.Discard)
	if err == nil {
		err = got.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	if !got.XDS.Enabled() || !got.XDS.StartWithoutRules {
		t.Errorf("enabled %v, force start %v", got.XDS.Enabled(), got.XDS.StartWithoutRules)
	}
	c, ignored := got.XDS.ClientOptions("v1")
	want := xds.Options{
		ServerURL: "envoy-gateway:18001", TypeURL: xdstest.TypeURL, NodeID: "envoy-ratelimit",
		NodeMetadata:  map[string]string{"a": "1", "b": "x=y"},
		UserAgentName: "fastlimit", UserAgentVersion: "v1",
		Headers:      map[string]string{"authorization": "Bearer a:b", "x-id": "7"},
		TLS:          &xds.TLS{CertFile: certs.ClientCert, KeyFile: certs.ClientKey, CAFile: certs.CAFile, ServerName: "eg.test"},
		Backoff:      xds.Backoff{Initial: time.Second, Max: 30 * time.Second, Factor: 2},
		ConnectRetry: 7 * time.Second, MaxRecvMsgSize: 1 << 20,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("client options\n got %+v\nwant %+v", c, want)
	}
	if !reflect.DeepEqual(ignored, []string{"junk"}) {
		t.Errorf("ignored metadata %q", ignored)
	}
}

const xdsNode = "fastlimit-test"

func TestApplyXDSBadResource(t *testing.T) {
	s := newServer(t, zaptest.NewLogger(t), "--config-type", "GRPC_XDS_SOTW")
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	good, err := anypb.New(xdstest.Config("r", "d", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1)))
	if err != nil {
		t.Fatal(err)
	}
	// A resource of another type, as a confused server might send.
	other, err := anypb.New(&rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND})
	if err != nil {
		t.Fatal(err)
	}
	err = s.applyXDS([]*anypb.Any{good, other})
	if err == nil || !strings.Contains(err.Error(), "resource #1 (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitPolicy)") {
		t.Fatalf("error %v", err)
	}
	if s.rules.Current() != nil || s.limiter.Rules() != nil {
		t.Error("rules swapped in despite a bad resource")
	}
	if got := metricValue(t, s.registry, "fastlimit_config_loads_total", "result", "failure"); got != 1 {
		t.Errorf("failed loads %v", got)
	}
	if err := s.applyXDS([]*anypb.Any{good}); err != nil {
		t.Fatal(err)
	}
	if s.rules.Current() == nil || !s.rules.Current().FromXDS {
		t.Error("good resource not swapped in")
	}
}
