package e2e_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// The addresses of e2e/testdata/envoy's bootstraps, which a test replaces
// with envoytest.Rewrite: the listener, FastLimit's gRPC port, the HTTP,
// gRPC and TCP upstreams.
const (
	tmplListener = "0.0.0.0:10000"
	tmplRLS      = "fastlimit:8081"
	tmplUpstream = "upstream:80"
	tmplGRPC     = "grpc-upstream:50051"
	tmplTCP      = "tcp-upstream:7000"
)

// routedCluster is the cluster the HTTP bootstraps of testdata/envoy route
// requests to: Envoy's rate-limit filter counts its calls (ok, over_limit,
// error, failure_mode_allowed) in that cluster's stats.
const routedCluster = "upstream"

// startAdmin starts the binary on the rules in dir with flags, its admin
// listener on a loopback port of its own (f.Admin).
func startAdmin(t testing.TB, dir string, flags ...string) *fastlimit {
	t.Helper()
	admin := loopback.Addr(t)
	f := start(t, launch{rules: dir, flags: append([]string{"--admin-addr", admin}, flags...)})
	f.Admin = admin
	return f
}

// envoyTemplate reads e2e/testdata/envoy/name.
func envoyTemplate(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "envoy", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// front is one Envoy in front of a rate-limit server.
type front struct {
	*envoytest.Envoy
	// Listener is the address its listener serves.
	Listener string
	// cluster is the cluster requests are routed to, whose stats count
	// the filter's calls (routedCluster unless set).
	cluster string
}

// startFront starts Envoy on bootstrap with its addresses replaced (addrs:
// the bootstrap's address -> the real one), its listener, tmplListener,
// on a free port.
func startFront(t testing.TB, name string, bootstrap []byte, addrs map[string]string) *front {
	t.Helper()
	return startFrontOn(t, name, bootstrap, tmplListener, addrs)
}

// startFrontOn is startFront for a bootstrap whose listener is at
// listener.
func startFrontOn(t testing.TB, name string, bootstrap []byte, listener string, addrs map[string]string) *front {
	t.Helper()
	all := map[string]string{listener: envoytest.ListenerAddr(t)}
	for k, v := range addrs {
		all[k] = v
	}
	cfg, err := envoytest.Rewrite(bootstrap, all)
	if err != nil {
		t.Fatal(err)
	}
	// Access logs are flushed every 100 ms, not Envoy's 10 s.
	e := envoytest.Start(t, cfg, envoytest.Options{Name: name, Args: []string{"--file-flush-interval-msec", "100"}})
	return &front{Envoy: e, Listener: all[listener], cluster: routedCluster}
}

// client returns a client of the front from a loopback address no other
// client of this test binary uses.
func (f *front) client(t testing.TB) *envoytest.Client {
	return envoytest.NewClient(t, f.Listener, nextSource())
}

// rlsErrors is Envoy's count of rate-limit calls that failed (FastLimit
// unreachable, an error answer, or past the filter's timeout).
func (f *front) rlsErrors() int64 { return f.rlStat("error") }

// rlStat is one of the filter's counters: ok, over_limit, error,
// failure_mode_allowed.
func (f *front) rlStat(name string) int64 {
	n, _ := f.Stat("cluster." + f.cluster + ".ratelimit." + name)
	return n
}

var sources atomic.Int64

// nextSource returns a loopback address of its own for a client:
// 127.1.x.y, so that each client (each attempt of a test) has counters of
// its own for rules on remote_address.
func nextSource() string {
	n := sources.Add(1)
	return fmt.Sprintf("127.1.%d.%d", n/250%250, n%250+1)
}

// errInconclusive marks an attempt that says nothing of FastLimit: a window
// turned during it, or Envoy's call to FastLimit failed on a busy machine.
var errInconclusive = errors.New("inconclusive attempt")

// attempt runs run with a client of its own up to three times, while
// its runs are inconclusive: run's error wraps errInconclusive, or the
// epoch-aligned window of length window turned while it ran (a fixed
// window's counter started again). Any other error fails t. Counting tests
// through Envoy use it: a fresh client address starts fresh counters.
func attempt(t *testing.T, f *front, window time.Duration, run func(c *envoytest.Client) error) {
	t.Helper()
	for i := 1; ; i++ {
		c := f.client(t)
		before := time.Now().Truncate(window)
		err := run(c)
		turned := !time.Now().Truncate(window).Equal(before)
		if err == nil && !turned {
			return
		}
		if !turned && !errors.Is(err, errInconclusive) {
			t.Fatalf("client %s: %v", c.Source, err)
		}
		if i == 3 {
			t.Fatalf("three attempts were inconclusive; the last (client %s): window turned %v, %v", c.Source, turned, err)
		}
		t.Logf("attempt %d (client %s) inconclusive, again with another client: window turned %v, %v", i, c.Source, turned, err)
	}
}

// checked sends a request and returns errInconclusive when Envoy's call to
// FastLimit failed meanwhile (its failure mode answered, not FastLimit).
func (f *front) checked(t testing.TB, c *envoytest.Client, method, path string, hdr ...string) (envoytest.Response, error) {
	t.Helper()
	before := f.rlsErrors()
	r := c.Do(t, method, path, hdr...)
	if after := f.rlsErrors(); after != before {
		return r, fmt.Errorf("%w: Envoy counted %d failed rate-limit calls during %s %s (answered %d)", errInconclusive, after-before, method, path, r.Code)
	}
	return r, nil
}

// series returns the value of one series of f's metrics, 0 when absent.
func series(t testing.TB, f *fastlimit, name string) float64 {
	t.Helper()
	code, page := scrape.Get(t, "http://"+f.Admin+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s/metrics: %d", f.Admin, code)
	}
	return scrape.Value(t, page, name)
}

// waitSeries fails t unless series name reaches want within d, and
// returns its value then.
func waitSeries(t testing.TB, f *fastlimit, name string, want float64, d time.Duration) float64 {
	t.Helper()
	var got float64
	if !wait.True(d, func() bool { got = series(t, f, name); return got >= want }) {
		t.Fatalf("%s = %v within %v, want %v", name, got, d, want)
	}
	return got
}

// topDescriptors returns, per rule path of domain, the descriptors
// FastLimit decided for it (by hits, all kept), each as "k=v,k2=v2".
func topDescriptors(t testing.TB, f *fastlimit, domain string) map[string][]string {
	t.Helper()
	code, body := scrape.Get(t, "http://"+f.Admin+"/v1/top?by=hits&n=0&domain="+url.QueryEscape(domain))
	if code != http.StatusOK {
		t.Fatalf("/v1/top: %d %s", code, body)
	}
	var top struct {
		Rules []struct {
			Rule    string `json:"rule"`
			Entries []struct {
				Descriptor []struct{ Key, Value string } `json:"descriptor"`
			} `json:"entries"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatalf("/v1/top: %v\n%s", err, body)
	}
	out := map[string][]string{}
	for _, r := range top.Rules {
		for _, e := range r.Entries {
			var kv []string
			for _, p := range e.Descriptor {
				kv = append(kv, p.Key+"="+p.Value)
			}
			out[r.Rule] = append(out[r.Rule], strings.Join(kv, ","))
		}
		slices.Sort(out[r.Rule])
	}
	return out
}

// httpFront is Envoy on testdata/envoy/http.yaml in front of rls (a
// FastLimit's or a probe's gRPC address), with subs applied first
// (envoytest.Substitute pairs), and its HTTP and gRPC upstreams.
type httpFront struct {
	*front
	Up   *envoytest.Upstream
	GRPC *envoytest.GRPCUpstream
}

func startHTTPFront(t testing.TB, name, rls string, subs ...string) *httpFront {
	t.Helper()
	up, g := envoytest.StartUpstream(t, nil), envoytest.StartGRPCUpstream(t)
	cfg := envoytest.Substitute(t, envoyTemplate(t, "http.yaml"), subs...)
	f := startFront(t, name, cfg, map[string]string{tmplRLS: rls, tmplUpstream: up.Addr, tmplGRPC: g.Addr})
	return &httpFront{front: f, Up: up, GRPC: g}
}

// accessLines returns the JSON access-log lines of http.yaml's listener
// that Envoy has written so far, decoded.
func (f *front) accessLines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(f.Log(), "\n") {
		if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"access":"e2e"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}
