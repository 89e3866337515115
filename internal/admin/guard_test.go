package admin_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

// opsToken is the token of the guard tests' token file.
const opsToken = "oncall-0123456789abcdef"

// tokenFile writes a token file of opsToken, named oncall.
func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	files.Write(t, path, "oncall:"+opsToken+"\n")
	return path
}

// via returns base with its host replaced by 127.0.0.1, for a server
// bound to 0.0.0.0.
func via(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return "http://127.0.0.1:" + port
}

// TestReadsBeyondLoopback: bound beyond loopback, the admin listener
// answers the reads that reveal identifiers (/v1/top, /v1/explain,
// /v1/usage, /v1/quota, /v1/status, the page, pprof) only with the
// writes' authorization; /metrics, the rules and the index stay open for
// scrapers. On loopback they need none.
func TestReadsBeyondLoopback(t *testing.T) {
	rules := map[string]string{"ops.yaml": opsRules}
	explain := `{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}`
	type req struct{ method, path, body, accept string }
	protected := []req{
		{http.MethodGet, "/v1/top?domain=ops", "", ""},
		{http.MethodGet, "/v1/top", "", ""},
		{http.MethodGet, "/v1/usage?domain=ops&descriptor=user=ann", "", ""},
		{http.MethodGet, "/v1/quota?domain=ops&bucket=user=ann", "", ""},
		{http.MethodGet, "/v1/status", "", ""},
		{http.MethodPost, "/v1/explain", explain, ""},
		{http.MethodGet, "/", "", "text/html"},
		{http.MethodGet, "/debug/pprof/", "", ""},
		{http.MethodGet, "/debug/pprof/cmdline", "", ""},
		{http.MethodGet, "/debug/pprof/goroutine?debug=1", "", ""},
	}
	opened := []req{
		{http.MethodGet, "/metrics", "", ""},
		{http.MethodGet, "/rlconfig", "", ""},
		{http.MethodGet, "/stats", "", ""},
		{http.MethodGet, "/v1/rules", "", ""},
		{http.MethodGet, "/v1/status/rules", "", ""},
		{http.MethodGet, "/", "", ""},
	}
	ask := func(base string, r req, headers ...string) (int, string) {
		return call(t, nil, r.method, base+r.path, r.body, append([]string{"Accept", r.accept}, headers...)...)
	}
	wide, _ := testServer(t, rules, "--admin-addr", "0.0.0.0:0", "--admin-token-file", tokenFile(t), "--pprof", "--rlqs")
	base := via(wide.AdminAddr())
	for _, r := range protected {
		if code, out := ask(base, r); code != http.StatusForbidden || !strings.Contains(out, "--admin-token-file") ||
			!strings.Contains(out, "fastlimit's commands: --token-file") {
			t.Errorf("beyond loopback, %s %s without a token: %d %.200s, want 403", r.method, r.path, code, out)
		}
		if code, out := ask(base, r, "Authorization", "Bearer "+opsToken); code != http.StatusOK {
			t.Errorf("beyond loopback, %s %s with a token: %d %.200s", r.method, r.path, code, out)
		}
	}
	for _, r := range opened {
		if code, out := ask(base, r); code != http.StatusOK {
			t.Errorf("beyond loopback, %s %s: %d %.200s, want 200 without a token", r.method, r.path, code, out)
		}
	}
	// Without any authorization configured, nothing protected answers.
	bare, _ := testServer(t, rules, "--admin-addr", "0.0.0.0:0")
	if code, out := call(t, nil, http.MethodGet, via(bare.AdminAddr())+"/v1/top", ""); code != http.StatusForbidden ||
		!strings.Contains(out, "none is configured") {
		t.Errorf("beyond loopback without authorization configured: %d %s", code, out)
	}
	// On loopback, reads need none.
	local, _ := testServer(t, rules, "--pprof", "--rlqs")
	for _, r := range append(protected, opened...) {
		if code, out := ask("http://"+local.AdminAddr(), r); code != http.StatusOK {
			t.Errorf("on loopback, %s %s: %d %.200s", r.method, r.path, code, out)
		}
	}
}

// TestCrossSiteWrites: a write must be JSON and come from no page of
// another site, whatever authorizes it: a browser holding the operator's
// client certificate would send a form post or a text/plain fetch from
// any page the operator visits.
func TestCrossSiteWrites(t *testing.T) {
	fs := certtest.NewFiles(t)
	s := testServerOn(t, files.Dir(t, map[string]string{"ops.yaml": opsRules}), zap.NewNop(),
		"--admin-tls-cert", fs.ServerCert, "--admin-tls-key", fs.ServerKey, "--admin-tls-client-ca", fs.CAFile)
	client, err := tls.LoadX509KeyPair(fs.ClientCert, fs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	authed := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certtest.Pool(fs.CA),
		Certificates: []tls.Certificate{client}}}, Timeout: 30 * time.Second}
	url := "https://" + s.AdminAddr() + "/v1/counters/reset"
	reset := `{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}`
	for _, tc := range []struct {
		name    string
		headers []string
		code    int
	}{
		{"text/plain", []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"a form", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"no content type", []string{"Content-Type", ""}, http.StatusUnsupportedMediaType},
		{"another origin", []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"an opaque origin", []string{"Origin", "null"}, http.StatusForbidden},
		{"cross-site", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"same-site", []string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
		{"JSON with a charset", []string{"Content-Type", "application/json; charset=utf-8"}, http.StatusOK},
		{"the page's own origin", []string{"Origin", "https://" + s.AdminAddr(), "Sec-Fetch-Site", "same-origin"}, http.StatusOK},
		{"a command", nil, http.StatusOK},
	} {
		if code, out := call(t, authed, http.MethodPost, url, reset, tc.headers...); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, out, tc.code)
		}
	}
	explain := "https://" + s.AdminAddr() + "/v1/explain"
	if code, _ := call(t, authed, http.MethodPost, explain, reset, "Content-Type", "text/plain"); code != http.StatusUnsupportedMediaType {
		t.Errorf("a text/plain explain: %d, want 415", code)
	}
}

// TestHostChecked: the admin listener answers a Host that is an IP
// address, localhost or a name of --admin-allowed-hosts; a page that DNS
// rebinding points at it sends its own name, and gets 421.
func TestHostChecked(t *testing.T) {
	s, _ := testServer(t, map[string]string{"ops.yaml": opsRules}, "--admin-allowed-hosts", "rl-admin.limits.svc,RL-Admin", "--pprof")
	_, port, _ := net.SplitHostPort(s.AdminAddr())
	for _, tc := range []struct {
		host string
		code int
	}{
		{"127.0.0.1:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"10.1.2.3:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"LOCALHOST.", http.StatusOK},
		{"app.localhost:" + port, http.StatusOK},
		{"rl-admin.limits.svc:" + port, http.StatusOK},
		{"rl-admin", http.StatusOK},
		{"evil.example:" + port, http.StatusMisdirectedRequest},
		{"rl-admin.limits.svc.evil.example", http.StatusMisdirectedRequest},
		{"localhost.evil.example", http.StatusMisdirectedRequest},
	} {
		for _, path := range []string{"/v1/top", "/debug/pprof/", "/metrics"} {
			req, err := http.NewRequest(http.MethodGet, "http://"+s.AdminAddr()+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Errorf("Host %s, %s: %d, want %d", tc.host, path, resp.StatusCode, tc.code)
			}
		}
	}
}

// TestAuditAtWarn: a write is audited at warn, so that --log-level warn
// keeps it; each descriptor's values are quoted, so that a value holding
// ',' '=' or '"' cannot make a reset of one descriptor read as a reset
// of others.
func TestAuditAtWarn(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	s := testServerOn(t, files.Dir(t, map[string]string{"ops.yaml": opsRules}), zap.New(core), "--admin-token-file", tokenFile(t))
	url := "http://" + s.AdminAddr() + "/v1/counters/reset"
	odd := "mallory\",plan=\"gold,user=ann"
	body := fmt.Sprintf(`{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":%q}]},{"entries":[{"key":"user","value":"x\ny"}]}]}`, odd)
	if code, out := call(t, nil, http.MethodPost, url, body, "Authorization", "Bearer "+opsToken); code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, out)
	}
	audits := logs.FilterMessage("admin write").All()
	if len(audits) != 1 {
		t.Fatalf("%d audit lines at warn, want 1", len(audits))
	}
	got := fmt.Sprint(audits[0].ContextMap()["descriptors"])
	if want := `[user="mallory\",plan=\"gold,user=ann" user="x\ny"]`; got != want {
		t.Errorf("descriptors %s, want %s", got, want)
	}
}

// TestRefusalsRateLimited: a flood of refused writes writes a line a
// second, the next naming how many were not logged, and every refusal is
// counted.
func TestRefusalsRateLimited(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	s := testServerOn(t, files.Dir(t, map[string]string{"ops.yaml": opsRules}), zap.New(core), "--admin-token-file", tokenFile(t))
	url := "http://" + s.AdminAddr() + "/v1/counters/reset"
	start := time.Now()
	for range 300 {
		if code, _ := call(t, nil, http.MethodPost, url, `{}`, "Authorization", "Bearer wrong"); code != http.StatusForbidden {
			t.Fatalf("a wrong token: %d", code)
		}
	}
	took := time.Since(start)
	lines := logs.FilterMessage("admin request refused").All()
	if len(lines) == 0 || len(lines) > 1+int(took/time.Second) {
		t.Errorf("%d lines for 300 refusals in %s, want one a second", len(lines), took)
	}
	var logged int64
	for _, l := range lines {
		logged += 1 + l.ContextMap()["suppressed"].(int64)
	}
	_, page := scrape.Get(t, "http://"+s.AdminAddr()+"/metrics")
	if got := scrape.Value(t, page, `fastlimit_admin_requests_refused_total{reason="unauthorized"}`); got != 300 {
		t.Errorf("fastlimit_admin_requests_refused_total{reason=\"unauthorized\"} = %v, want 300", got)
	}
	if logged > 300 {
		t.Errorf("the lines account for %d refusals of 300", logged)
	}
}

// descriptorsJSON is a RateLimitRequest's descriptors of n descriptors
// of entries entries each.
func descriptorsJSON(n, entries int) string {
	ds := make([]string, n)
	for i := range ds {
		es := make([]string, entries)
		for j := range es {
			es[j] = fmt.Sprintf(`{"key":"k%d","value":"v%d"}`, j, i)
		}
		ds[i] = `{"entries":[` + strings.Join(es, ",") + `]}`
	}
	return "[" + strings.Join(ds, ",") + "]"
}

// TestAdminBounds: every admin body is bounded in bytes, and every
// request in descriptors and entries, by default (60,000 descriptors in
// 3.2 MB once took an explain's answer to 27 MB), and lower with
// --max-descriptors and --max-entries.
func TestAdminBounds(t *testing.T) {
	s, _ := testServer(t, map[string]string{"ops.yaml": opsRules}, "--admin-token-file", tokenFile(t), "--rlqs")
	base := "http://" + s.AdminAddr()
	auth := []string{"Authorization", "Bearer " + opsToken}
	explain := func(n, entries int) string {
		return `{"domain":"ops","descriptors":` + descriptorsJSON(n, entries) + `}`
	}
	for _, tc := range []struct {
		name, path, body string
		code             int
	}{
		{"60,000 descriptors", "/v1/explain", explain(60_000, 1), http.StatusRequestEntityTooLarge},
		{"64 descriptors", "/v1/explain", explain(64, 1), http.StatusOK},
		{"65 descriptors", "/v1/explain", explain(65, 1), http.StatusBadRequest},
		{"32 entries", "/v1/explain", explain(1, 32), http.StatusOK},
		{"33 entries", "/v1/explain", explain(1, 33), http.StatusBadRequest},
		{"a bucket of 33 entries", "/v1/explain", `{"domain":"ops","bucket":{` + bucketJSON(33) + `}}`, http.StatusBadRequest},
		{"a reset of 65 descriptors", "/v1/counters/reset", explain(65, 1), http.StatusBadRequest},
		{"a reset of a 33-entry descriptor", "/v1/counters/reset", explain(1, 33), http.StatusBadRequest},
		{"a reset of 65 KiB", "/v1/counters/reset", `{"domain":"` + strings.Repeat("x", 65<<10) + `"}`, http.StatusRequestEntityTooLarge},
		{"a refund of 33 values", "/v1/counters/refund", `{"domain":"ops","rule":"ops.user","hits":1,"values":["` + strings.Repeat(`v","`, 32) + `v"]}`, http.StatusBadRequest},
	} {
		if code, out := call(t, nil, http.MethodPost, base+tc.path, tc.body, auth...); code != tc.code {
			t.Errorf("%s: %d %.300s, want %d", tc.name, code, out, tc.code)
		}
	}
	keys := make([]string, 33)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d=v", i)
	}
	if code, _ := call(t, nil, http.MethodGet, base+"/v1/usage?domain=ops&descriptor="+strings.Join(keys, ","), ""); code != http.StatusBadRequest {
		t.Errorf("a usage of 33 entries: %d, want 400", code)
	}
	// --max-descriptors and --max-entries lower the bounds.
	low, _ := testServer(t, map[string]string{"ops.yaml": opsRules}, "--max-descriptors", "2", "--max-entries", "3")
	for body, code := range map[string]int{explain(2, 3): http.StatusOK, explain(3, 1): http.StatusBadRequest, explain(1, 4): http.StatusBadRequest} {
		if got, out := call(t, nil, http.MethodPost, "http://"+low.AdminAddr()+"/v1/explain", body); got != code {
			t.Errorf("under --max-descriptors 2 --max-entries 3, %.80s: %d %.200s, want %d", body, got, out, code)
		}
	}
}

// bucketJSON is n distinct "key":"value" pairs.
func bucketJSON(n int) string {
	kv := make([]string, n)
	for i := range kv {
		kv[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(kv, ",")
}
