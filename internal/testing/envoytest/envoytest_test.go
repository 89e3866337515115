package envoytest_test

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
)

const bootstrap = `
admin:
  address:
    socket_address: { address: 0.0.0.0, port_value: 9901 }
static_resources:
  listeners:
    - name: in
      address:
        socket_address: { address: 0.0.0.0, port_value: 10000 }
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: in
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        - match: { prefix: /direct }
                          direct_response: { status: 204 }
                        - match: { prefix: / }
                          route: { cluster: up }
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: up
      type: STATIC
      connect_timeout: 1s
      load_assignment:
        cluster_name: up
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: { address: upstream, port_value: 80 }
`

func TestRewrite(t *testing.T) {
	out, err := envoytest.Rewrite([]byte(bootstrap), map[string]string{
		"0.0.0.0:10000": "127.0.0.1:20001",
		"upstream:80":   "127.0.0.1:20002",
	})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"{address: 127.0.0.1, port_value: 20001}", "{address: 127.0.0.1, port_value: 20002}", "port_value: 9901"} {
		if !strings.Contains(s, want) {
			t.Errorf("rewritten bootstrap lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "upstream") || strings.Contains(s, "10000") {
		t.Errorf("an address was not rewritten:\n%s", s)
	}
	if _, err := envoytest.Rewrite([]byte(bootstrap), map[string]string{"echo:80": "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "echo:80") {
		t.Errorf("a missing address: err = %v, want one naming echo:80", err)
	}
}

func TestSetAdmin(t *testing.T) {
	out, err := envoytest.SetAdmin([]byte(bootstrap), "127.0.0.1:20003")
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, "port_value: 20003") || strings.Contains(s, "9901") {
		t.Errorf("admin not moved:\n%s", s)
	}
	out, err = envoytest.SetAdmin([]byte("static_resources: {}\n"), "127.0.0.1:20004")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "admin:") || !strings.Contains(string(out), "20004") {
		t.Errorf("admin not added:\n%s", out)
	}
}

// TestStart runs a real Envoy: ready, routing to an upstream and answering
// directly, its stats readable, and stopped.
func TestStart(t *testing.T) {
	up := envoytest.StartUpstream(t, nil)
	listen := envoytest.ListenerAddr(t)
	cfg, err := envoytest.Rewrite([]byte(bootstrap), map[string]string{"0.0.0.0:10000": listen, "upstream:80": up.Addr})
	if err != nil {
		t.Fatal(err)
	}
	e := envoytest.Start(t, cfg, envoytest.Options{Name: "start"})
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + listen + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("through Envoy: %d %q", resp.StatusCode, body)
	}
	if seen := up.Seen(); len(seen) != 1 || seen[0].Get("X-Request-Id") == "" {
		t.Errorf("upstream saw %v, want one request with Envoy's x-request-id", seen)
	}
	resp, err = c.Get("http://" + listen + "/direct")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Errorf("direct_response: %d", resp.StatusCode)
	}
	e.WaitStat(t, "http.in.downstream_rq_2xx", 2, 10*time.Second)
	e.Stop()
	if !e.Exited() {
		t.Error("Stop returned with Envoy running")
	}
}

// TestValidate shows that Validate passes a bootstrap Envoy loads and
// reports one it refuses (a STATIC cluster naming a host, not an IP).
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good, err := envoytest.Rewrite([]byte(bootstrap), map[string]string{"upstream:80": "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/good.yaml", good, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := envoytest.Validate(t, dir+"/good.yaml"); err != nil {
		t.Fatalf("a good bootstrap: %v\n%s", err, out)
	}
	if err := os.WriteFile(dir+"/bad.yaml", []byte(bootstrap), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := envoytest.Validate(t, dir+"/bad.yaml")
	if err == nil || !strings.Contains(out, "malformed IP address: upstream") {
		t.Fatalf("a STATIC cluster naming a host: err = %v\n%s", err, out)
	}
}

func TestSubstitute(t *testing.T) {
	out := envoytest.Substitute(t, []byte("a: 1\nb: 2\n"), "a: 1", "a: 3", "b: 2", "b: 4")
	if string(out) != "a: 3\nb: 4\n" {
		t.Errorf("Substitute: %q", out)
	}
	for _, old := range []string{"c: 1", "a"} {
		ft := &fakeT{TB: t}
		func() {
			defer func() { _ = recover() }()
			envoytest.Substitute(ft, []byte("a: 1\na: 2\n"), old, "x")
		}()
		if !ft.failed {
			t.Errorf("Substitute of %q (absent, or twice) did not fail", old)
		}
	}
}

// fakeT records a Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}

func TestCodesString(t *testing.T) {
	if got := (envoytest.Codes{429: 1, 200: 10}).String(); got != "200×10 429×1" {
		t.Errorf("Codes.String() = %q", got)
	}
}
