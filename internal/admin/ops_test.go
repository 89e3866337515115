package admin_test

import (
	"context"
	"crypto/tls"
	_ "embed"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestMethodNotAllowed: every admin path answers 405 with an Allow header
// to a method it does not serve, unknown paths included.
func TestMethodNotAllowed(t *testing.T) {
	s, _ := testServer(t, map[string]string{"ops.yaml": opsRules})
	base := "http://" + s.AdminAddr()
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/v1/usage", "GET, HEAD"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
		{http.MethodPut, "/", "GET, HEAD"},
		{http.MethodPost, "/nothing/here", "GET, HEAD"},
		{http.MethodGet, "/v1/explain", "POST"},
		{http.MethodDelete, "/v1/counters/reset", "POST"},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
		}
	}
	if code, _ := call(t, nil, http.MethodHead, base+"/v1/rules", ""); code != http.StatusOK {
		t.Errorf("HEAD /v1/rules: %d", code)
	}
}

// TestExplain: explain names each descriptor's rule with its file and
// line, keys, limits, mode and state, and the code the request would get,
// charging nothing; an RLQS bucket's explanation names its rule.
func TestExplain(t *testing.T) {
	s, dir := testServer(t, map[string]string{"ops.yaml": opsRules}, "--rlqs") // for the bucket's explanation
	for range 2 {
		s.decide(t, "ops", "user", "ann")
	}
	body := `{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":"ann"}]},
		{"entries":[{"key":"plan","value":"gold"},{"key":"user","value":"ann"}]},
		{"entries":[{"key":"tokens","value":"t"}],"hits_addend":5},{"entries":[{"key":"none","value":"x"}]}]}`
	url := "http://" + s.AdminAddr() + "/v1/explain"
	var first admin.Explanation
	for i := range 2 {
		code, out := call(t, nil, http.MethodPost, url, body)
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, out)
		}
		e := decode[admin.Explanation](t, out)
		if i == 0 {
			first = e
		}
		for j, d := range e.Descriptors {
			if state(d) != state(first.Descriptors[j]) {
				t.Errorf("explain %d, descriptor %d: %s, then %s: something was charged", i, j, state(first.Descriptors[j]), state(d))
			}
		}
	}
	file := filepath.Join(dir, "ops.yaml")
	d := first.Descriptors
	if first.Code != "OVER_LIMIT" || len(d) != 4 || first.Store != "memory" {
		t.Fatalf("explanation %+v", first)
	}
	if r := d[0].Rule; d[0].Code != "OVER_LIMIT" || r.Source != file+":3" || r.From != "file" || r.Path != "ops.user" ||
		*d[0].Count != 2 || *d[0].Remaining != 0 || len(d[0].Keys) != 1 || !strings.HasPrefix(d[0].Keys[0], "ratelimit:{ops/user=ann}:default:") {
		t.Errorf("descriptor 0: %+v %+v", d[0], r)
	}
	if r := d[1].Rule; d[1].Code != "OK" || r.Source != file+":8" || r.Algorithm != "sliding_window" || r.Name != "gold" ||
		fmt.Sprint(r.Replaces) != "[other]" || len(d[1].Keys) != 2 || *d[1].Remaining != 9 || r.Levels[0] != (admin.Entry{Key: "plan", Value: "gold"}) {
		t.Errorf("descriptor 1: %+v %+v", d[1], r)
	}
	if r := d[2].Rule; d[2].Code != "OK" || !d[2].Shadowed || !r.ShadowMode || *r.Burst != 3 || d[2].Hits != 5 || d[2].Keys[0] != d[2].Keys[0][:len(d[2].Keys[0])-6]+"tokens" {
		t.Errorf("descriptor 2 (5 hits of a shadowed bucket of 3): %+v %+v", d[2], r)
	}
	if d[3].Matched || d[3].Rule != nil {
		t.Errorf("descriptor 3 matched %+v", d[3])
	}
	for _, bad := range []string{`{"domain":`, `{"domain":"","descriptors":[{"entries":[]}]}`} {
		if code, _ := call(t, nil, http.MethodPost, url, bad); code != http.StatusBadRequest {
			t.Errorf("explain %s: %d, want 400", bad, code)
		}
	}
	// A domain the rules lack (the commonest "my limit does nothing": a
	// misspelt domain in Envoy's filter) says so, and names the domains.
	if e := decode[admin.Explanation](t, second(call(t, nil, http.MethodPost, url, `{"domain":"opz","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}`))); !e.UnknownDomain ||
		fmt.Sprint(e.Domains) != "[ops]" || e.Code != "OK" {
		t.Errorf("explain of an unknown domain: %+v", e)
	}
	if e := first; e.UnknownDomain || e.Domains != nil {
		t.Errorf("explain of a known domain: unknown %v, domains %v", e.UnknownDomain, e.Domains)
	}
	code, out := call(t, nil, http.MethodPost, url, `{"domain":"ops","bucket":{"user":"ann"}}`)
	if b := decode[admin.BucketExplanation](t, out); code != http.StatusOK || b.Rule == nil || b.Rule.Source != file+":3" || b.Division.Rule != "ops.user" {
		t.Errorf("bucket explanation: %d %s", code, out)
	}
}

// TestExplainSeveralLimits: of a rule with several limits, explain lists
// each with its label, keys, size and state, marks the one that decides
// and those another descriptor's limit replaced, and charges none.
func TestExplainSeveralLimits(t *testing.T) {
	s, _ := testServer(t, map[string]string{"ops.yaml": opsRules})
	for range 3 {
		s.decide(t, "ops", "account", "acme")
	}
	url := "http://" + s.AdminAddr() + "/v1/explain"
	alone := `{"domain":"ops","descriptors":[{"entries":[{"key":"account","value":"acme"}]}]}`
	var first []admin.ExplainedLimit
	for i := range 2 {
		code, out := call(t, nil, http.MethodPost, url, alone)
		e := decode[admin.Explanation](t, out)
		if code != http.StatusOK || e.Code != "OVER_LIMIT" || len(e.Descriptors) != 1 {
			t.Fatalf("%d %s", code, out)
		}
		d := e.Descriptors[0]
		if d.Rule.Name != "daily" || *d.Remaining != 0 || len(d.Limits) != 3 {
			t.Fatalf("descriptor: %s", out)
		}
		if i == 0 {
			first = d.Limits
			continue
		}
		for j, l := range d.Limits {
			if *l.Remaining != *first[j].Remaining {
				t.Errorf("limit %s: %d left, then %d: something was charged", l.Label, *first[j].Remaining, *l.Remaining)
			}
		}
	}
	base := "ratelimit:{ops/account=acme}:default:"
	for j, want := range []struct {
		label, code, algorithm string
		decides                bool
		keys                   int
		keyPrefix              string
		count                  int64
		remaining              uint32
	}{
		{"ops.account#0", "OK", "fixed_window", false, 1, base, 3, 7},
		{"ops.account#daily", "OVER_LIMIT", "sliding_window", true, 2, base + "#1:", 3, 0},
		{"ops.account#other", "OK", "fixed_window", false, 1, base + "#2:", 3, 97},
	} {
		l := first[j]
		if l.Label != want.label || l.Code != want.code || l.Algorithm != want.algorithm || l.Decides != want.decides || l.Replaced ||
			len(l.Keys) != want.keys || !strings.HasPrefix(l.Keys[0], want.keyPrefix) || strings.Contains(l.Keys[0][len(want.keyPrefix):], "#") ||
			*l.Count != want.count || *l.Remaining != want.remaining || l.ResetMs == nil || (l.RetryAfterMs != nil) != want.decides {
			t.Errorf("limit %d: %+v (%+v), want %+v", j, l, l.State, want)
		}
	}
	// Beside the gold plan's limit, which replaces "other", that one is
	// listed as replaced, with its label alone.
	both := `{"domain":"ops","descriptors":[{"entries":[{"key":"plan","value":"gold"},{"key":"user","value":"ann"}]},
		{"entries":[{"key":"account","value":"acme"}]}]}`
	_, out := call(t, nil, http.MethodPost, url, both)
	ls := decode[admin.Explanation](t, out).Descriptors[1].Limits
	if len(ls) != 3 || !ls[2].Replaced || ls[2].Label != "ops.account#other" || ls[2].Code != "" || ls[2].Keys != nil ||
		ls[0].Replaced || !ls[1].Decides {
		t.Errorf("with the gold plan's limit: %s", out)
	}
	// A rule of one limit has no list.
	_, out = call(t, nil, http.MethodPost, url, `{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}`)
	if strings.Contains(out, `"limits"`) {
		t.Errorf("a rule of one limit: %s", out)
	}
}

// state is what an explained descriptor has left.
func state(d admin.Explained) string {
	deref := func(p *uint32) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return d.Code + " remaining " + deref(d.Remaining) + " tokens " + deref(d.Tokens)
}

// TestCountersAuthorization: without a token file or client CA, writes
// answer 403 naming the flags; with a token file, a write without a
// token, or with a wrong one, answers 403; with a token it resets and is
// audited with the token's name and the counts, never the token. The file
// is read again when it changes.
func TestCountersAuthorization(t *testing.T) {
	rules := map[string]string{"ops.yaml": opsRules}
	reset := `{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}`
	off, _ := testServer(t, rules)
	code, out := call(t, nil, http.MethodPost, "http://"+off.AdminAddr()+"/v1/counters/reset", reset)
	if code != http.StatusForbidden || !strings.Contains(out, "--admin-token-file") || !strings.Contains(out, "--admin-tls-client-ca") {
		t.Errorf("without authorization configured: %d %s", code, out)
	}

	tokens := filepath.Join(t.TempDir(), "tokens")
	files.Write(t, tokens, "# operators\nalice:s3cret-alice-0123456\nbob: s3cret-bob-01234567\n")
	core, logs := observer.New(zap.InfoLevel)
	s := testServerOn(t, files.Dir(t, rules), zap.New(core), "--admin-token-file", tokens)
	url := "http://" + s.AdminAddr() + "/v1/counters/reset"
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret-alice-0123456"}} {
		if code, out := call(t, nil, http.MethodPost, url, reset, h...); code != http.StatusForbidden || !strings.Contains(out, "bearer token") {
			t.Errorf("headers %q: %d %s", h, code, out)
		}
	}
	for range 3 {
		s.decide(t, "ops", "user", "ann")
	}
	code, out = call(t, nil, http.MethodPost, url, reset, "Authorization", "Bearer s3cret-bob-01234567")
	a := decode[admin.CountersAnswer](t, out)
	if code != http.StatusOK || a.Who != "token:bob" || *a.Descriptors[0].Before.Remaining != 0 || *a.Descriptors[0].After.Remaining != 2 {
		t.Fatalf("reset with bob's token: %d %s", code, out)
	}
	audits := logs.FilterMessage("admin write").All()
	if len(audits) != 1 {
		t.Fatalf("%d audit lines", len(audits))
	}
	f := audits[0].ContextMap()
	if f["who"] != "token:bob" || f["action"] != "reset" || f["remote"] == "" || fmt.Sprint(f["descriptors"]) != `[user="ann"]` ||
		fmt.Sprint(f["before"]) != "[ops.user: count 2, 0/2 left]" || fmt.Sprint(f["after"]) != "[ops.user: count 0, 2/2 left]" {
		t.Errorf("audit line %v", f)
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "s3cret") {
			t.Errorf("a token was logged: %s %v", e.Message, e.ContextMap())
		}
	}
	// Each version of the file is taken whole or refused whole: bob's
	// token removed, every token removed (emptied, or the file deleted),
	// and a malformed version revoke as they say, none keeping the old
	// tokens in force.
	alice, bob := []string{"Authorization", "Bearer s3cret-alice-0123456"}, []string{"Authorization", "Bearer s3cret-bob-01234567"}
	for _, step := range []struct {
		name, file     string // file "-": deleted
		alice, bob     int
		refusedMessage bool
	}{
		{"bob's token removed", "alice:s3cret-alice-0123456\n", http.StatusOK, http.StatusForbidden, false},
		{"emptied", "", http.StatusForbidden, http.StatusForbidden, false},
		{"alice back", "alice:s3cret-alice-0123456\n", http.StatusOK, http.StatusForbidden, false},
		{"deleted", "-", http.StatusForbidden, http.StatusForbidden, false},
		{"both back", "alice:s3cret-alice-0123456\nbob:s3cret-bob-01234567\n", http.StatusOK, http.StatusOK, false},
		{"malformed", "alice:s3cret-alice-0123456\nbob\n", http.StatusForbidden, http.StatusForbidden, true},
	} {
		if step.file == "-" {
			if err := os.Remove(tokens); err != nil {
				t.Fatal(err)
			}
		} else {
			files.Replace(t, tokens, step.file) // a new file, as a Secret's update
		}
		for who, h := range map[string][]string{"alice": alice, "bob": bob} {
			want := map[string]int{"alice": step.alice, "bob": step.bob}[who]
			code, out := call(t, nil, http.MethodPost, url, reset, h...)
			if code != want || (code == http.StatusForbidden && strings.Contains(out, "is refused") != step.refusedMessage) {
				t.Errorf("%s: %s's write: %d %s, want %d", step.name, who, code, out, want)
			}
		}
	}
	if n := logs.FilterMessage("admin token file refused: no token is in force until it is mended").FilterLevelExact(zap.ErrorLevel).Len(); n != 1 {
		t.Errorf("%d error lines for the malformed file, want 1", n)
	}
}

// TestCounters: a reset by rule and values, a refund of hits, and the
// bodies that are refused.
func TestCounters(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	files.Write(t, tokens, "ci:tok-0123456789abcdef\n")
	s, _ := testServer(t, map[string]string{"ops.yaml": opsRules}, "--admin-token-file", tokens)
	base := "http://" + s.AdminAddr() + "/v1/counters/"
	post := func(what, body string) (int, string) {
		return call(t, nil, http.MethodPost, base+what, body, "Authorization", "Bearer tok-0123456789abcdef")
	}
	for range 9 {
		s.decide(t, "ops", "plan", "gold", "user", "cy")
	}
	code, out := post("refund", `{"domain":"ops","rule":"ops.plan_gold.user","values":["cy"],"hits":4}`)
	if a := decode[admin.CountersAnswer](t, out); code != http.StatusOK || *a.Descriptors[0].Before.Remaining != 0 || *a.Descriptors[0].After.Remaining != 4 {
		t.Fatalf("refund: %d %s", code, out)
	}
	code, out = post("reset", `{"domain":"ops","rule":"ops.plan_gold.user","values":["cy"]}`)
	if a := decode[admin.CountersAnswer](t, out); code != http.StatusOK || *a.Descriptors[0].After.Remaining != 9 {
		t.Fatalf("reset: %d %s", code, out)
	}
	for _, tc := range []struct {
		what, body string
		code       int
	}{
		{"reset", `{"domain":"ops"}`, http.StatusBadRequest},
		{"reset", `{"domain":"ops","rule":"ops.user","values":["a","b"]}`, http.StatusBadRequest},
		{"reset", `{"domain":"ops","rule":"ops.nope","values":["a"]}`, http.StatusBadRequest},
		{"reset", `{"domain":"ops","rule":"ops.user","values":["a"],"hits":1}`, http.StatusBadRequest},
		{"reset", `{"domain":"ops","rules":"typo"}`, http.StatusBadRequest},
		{"refund", `{"domain":"ops","rule":"ops.user","values":["a"]}`, http.StatusBadRequest},
		{"reset", `{"domain":"ops","descriptors":[{"entries":[{"key":"none","value":"x"}]}]}`, http.StatusNotFound},
	} {
		if code, out := post(tc.what, tc.body); code != tc.code {
			t.Errorf("%s %s: %d %s, want %d", tc.what, tc.body, code, out, tc.code)
		}
	}
}

// TestCountersClientCertificate: with admin TLS and a client CA, reads
// need no certificate, and a write with one is authorized by its subject,
// which its audit line names.
func TestCountersClientCertificate(t *testing.T) {
	fs := certtest.NewFiles(t)
	core, logs := observer.New(zap.InfoLevel)
	s := testServerOn(t, files.Dir(t, map[string]string{"ops.yaml": opsRules}), zap.New(core),
		"--admin-tls-cert", fs.ServerCert, "--admin-tls-key", fs.ServerKey, "--admin-tls-client-ca", fs.CAFile)
	pool := certtest.Pool(fs.CA)
	client, err := tls.LoadX509KeyPair(fs.ClientCert, fs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	authed := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}}},
		Timeout: 30 * time.Second}
	base := "https://" + s.AdminAddr()
	if code, _ := call(t, anon, http.MethodGet, base+"/v1/rules", ""); code != http.StatusOK {
		t.Errorf("a read without a certificate: %d", code)
	}
	reset := `{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}`
	if code, _ := call(t, anon, http.MethodPost, base+"/v1/counters/reset", reset); code != http.StatusForbidden {
		t.Errorf("a write without a certificate: %d", code)
	}
	code, out := call(t, authed, http.MethodPost, base+"/v1/counters/reset", reset)
	if a := decode[admin.CountersAnswer](t, out); code != http.StatusOK || a.Who != "cert:CN=client" {
		t.Errorf("a write with a certificate: %d %s", code, out)
	}
	refused, audits := logs.FilterMessage("admin request refused").All(), logs.FilterMessage("admin write").All()
	if len(refused) != 1 || len(audits) != 1 {
		t.Fatalf("%d refusal and %d audit lines, want 1 each", len(refused), len(audits))
	}
	f := audits[0].ContextMap()
	if audits[0].LoggerName != "audit" || f["who"] != "cert:CN=client" || f["action"] != "reset" || f["remote"] == "" ||
		fmt.Sprint(f["descriptors"]) != `[user="ann"]` {
		t.Errorf("audit line of the certificate's write: %s %v", audits[0].LoggerName, f)
	}
}

// TestTop: /v1/top answers the top identifiers as JSON, of a domain or
// of every domain; a domain or rule the rules lack is 404, naming the
// domains; it is off with --top-keys 0.
func TestTop(t *testing.T) {
	other := "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	s, _ := testServer(t, map[string]string{"ops.yaml": opsRules, "edge.yaml": other})
	for _, u := range []string{"ann", "ann", "ann", "bo"} {
		s.decide(t, "ops", "user", u)
	}
	s.decide(t, "edge", "ip", "10.0.0.7")
	s.decide(t, "edge", "ip", "10.0.0.7")
	base := "http://" + s.AdminAddr() + "/v1/top"
	code, out := call(t, nil, http.MethodGet, base+"?domain=ops", "")
	a := decode[top.Answer](t, out)
	if code != http.StatusOK || len(a.Rules) != 1 || a.Rules[0].Entries[0].Values[0] != "ann" || a.Rules[0].Entries[0].Count != 1 {
		t.Errorf("over-limit top: %d %s", code, out)
	}
	code, out = call(t, nil, http.MethodGet, base+"?domain=ops&by=hits&rule=ops.user&n=1", "")
	if a := decode[top.Answer](t, out); code != http.StatusOK || len(a.Rules[0].Entries) != 1 || a.Rules[0].Entries[0].Count != 3 {
		t.Errorf("hits top: %d %s", code, out)
	}
	// Without a domain: every domain's rules, by domain.
	code, out = call(t, nil, http.MethodGet, base, "")
	if a := decode[top.Answer](t, out); code != http.StatusOK || len(a.Rules) != 2 || a.Rules[0].Rule != "edge.ip" || a.Rules[1].Rule != "ops.user" ||
		a.Replicas != 1 || a.Window == "" {
		t.Errorf("top of every domain: %d %s", code, out)
	}
	code, out = call(t, nil, http.MethodGet, base+"?rule=ops.user&by=hits", "")
	if a := decode[top.Answer](t, out); code != http.StatusOK || len(a.Rules) != 1 || a.Rules[0].Rule != "ops.user" {
		t.Errorf("top of a rule without its domain: %d %s", code, out)
	}
	for _, q := range []string{"?domain=ops&by=nope", "?domain=ops&n=-1"} {
		if code, _ := call(t, nil, http.MethodGet, base+q, ""); code != http.StatusBadRequest {
			t.Errorf("/v1/top%s: %d", q, code)
		}
	}
	for q, want := range map[string]string{
		"?domain=opz":                `no domain opz in the rules in force; their domains: edge, ops`,
		"?domain=ops&rule=ops.usr":   `no rule ops.usr in domain ops`,
		"?rule=edge.user":            `no rule edge.user in the rules in force`,
		"?domain=edge&rule=ops.user": `no rule ops.user in domain edge`,
		"?domain=%1b%5b31m":          `no domain "\x1b[31m"`,
	} {
		if code, out := call(t, nil, http.MethodGet, base+q, ""); code != http.StatusNotFound || !strings.Contains(out, want) {
			t.Errorf("/v1/top%s: %d %s, want 404 with %q", q, code, out, want)
		}
	}
	off, _ := testServer(t, map[string]string{"ops.yaml": opsRules}, "--top-keys", "0")
	if code, _ := call(t, nil, http.MethodGet, "http://"+off.AdminAddr()+"/v1/top?domain=ops", ""); code != http.StatusNotFound {
		t.Errorf("--top-keys 0: %d", code)
	}
}

// TestPage: a browser gets the page at "/", with the limited identifier
// rendered; other clients get the index; with 10,000 rules the page
// shows one page of them and the rules' JSON filters and pages.
func TestPage(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := range 10_000 {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", i)
	}
	s, _ := testServer(t, map[string]string{"ops.yaml": opsRules, "big.yaml": b.String()})
	for range 2 {
		s.decide(t, "big", "k9999", "<script>alert(1)</script>")
	}
	base := "http://" + s.AdminAddr()
	code, page := call(t, nil, http.MethodGet, base+"/", "", "Accept", "text/html,application/xhtml+xml")
	if code != http.StatusOK || !strings.Contains(page, "big.k9999") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") ||
		strings.Contains(page, "<script>alert(1)") || len(page) > 100_000 || strings.Contains(page, "src=\"http") {
		t.Errorf("page: %d, %d bytes, limited identifier shown: %v", code, len(page), strings.Contains(page, "big.k9999"))
	}
	// The page's script and style run by nonce, a new one each time, and
	// no page may frame it.
	var nonces []string
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		req.Header.Set("Accept", "text/html")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		_, nonce, _ := strings.Cut(csp, "script-src 'nonce-")
		nonce, _, _ = strings.Cut(nonce, "'")
		if len(nonce) < 16 || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") ||
			!strings.Contains(csp, "default-src 'none'") || resp.Header.Get("X-Frame-Options") != "DENY" ||
			!strings.Contains(string(body), `<script nonce="`+nonce+`">`) || !strings.Contains(string(body), `<style nonce="`+nonce+`">`) ||
			strings.Count(string(body), "<script") != 1 {
			t.Errorf("page CSP %q, X-Frame-Options %q; script and style by its nonce: %v", csp, resp.Header.Get("X-Frame-Options"),
				strings.Contains(string(body), `<script nonce="`+nonce+`">`))
		}
		nonces = append(nonces, nonce)
	}
	if nonces[0] == nonces[1] {
		t.Errorf("the same nonce twice: %s", nonces[0])
	}
	if _, index := call(t, nil, http.MethodGet, base+"/", ""); !strings.HasPrefix(index, "/metrics: ") {
		t.Errorf("index for a client that is no browser:\n%s", index)
	}
	_, out := call(t, nil, http.MethodGet, base+"/v1/status/rules?q=K999&offset=5&limit=3", "")
	p := decode[admin.RulesPage](t, out)
	if p.Total != 11 || len(p.Rules) != 3 || p.Rules[0].Rule != "big.k9994" {
		t.Errorf("filtered page: %+v", p)
	}
	_, out = call(t, nil, http.MethodGet, base+"/v1/status/rules?q=k9999", "")
	if p := decode[admin.RulesPage](t, out); len(p.Rules) != 1 || p.Rules[0].Hits != 2 || p.Rules[0].OverLimit != 1 || !strings.HasSuffix(p.Rules[0].Source, "big.yaml:20001") {
		t.Errorf("counted rule: %+v", p)
	}
	_, out = call(t, nil, http.MethodGet, base+"/v1/status", "")
	if st := decode[admin.Status](t, out); st.Store.Kind != "memory" || len(st.Limited) != 1 || st.Rules.Limits != 10_006 {
		t.Errorf("status: %s", out)
	}
}

// TestPageRLQSDivisions: the page and /v1/status show each RLQS division
// with its rule, bucket, limit and clients, at most admin.DivisionsOnPage of them
// and admin.ClientsOnPage clients of each, saying how many were left out.
func TestPageRLQSDivisions(t *testing.T) {
	rules := "domain: q\ndescriptors:\n" +
		"  - key: tier\n    value: \"*\"\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 60}\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 120}\n"
	s, _ := testServer(t, map[string]string{"q.yaml": rules}, "--rlqs")
	// One stream: 7 tiers, clients of one division, and a division per user.
	users := admin.DivisionsOnPage + 3
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "q"}
	add := func(k, v string) {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{k: v}}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 1})
	}
	for _, tier := range "abcdefg" {
		add("tier", string(tier))
	}
	for i := range users {
		add("user", fmt.Sprintf("u%03d", i))
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(grpcClient(t, s.GRPCAddr())).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(r); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.AdminAddr()
	var st admin.Status
	if !wait.True(patience, func() bool {
		_, out := call(t, nil, http.MethodGet, base+"/v1/status", "")
		st = decode[admin.Status](t, out)
		return len(st.Divisions) == admin.DivisionsOnPage
	}) {
		t.Fatalf("status: %d divisions, %d more", len(st.Divisions), st.MoreDivisions)
	}
	tiers := st.Divisions[0] // "{q/tier=*}" sorts before "{q/user=…}"
	if st.MoreDivisions != users+1-admin.DivisionsOnPage || tiers.Rule != "q.tier_*" || tiers.LimitRate != 60 ||
		len(tiers.Clients) != admin.ClientsOnPage || tiers.MoreClients != 7-admin.ClientsOnPage || tiers.Clients[0].AssignedRate == nil {
		t.Errorf("divisions: %d more; the tiers' %+v", st.MoreDivisions, tiers)
	}
	if u := st.Divisions[1]; u.Rule != "q.user" || u.Bucket["user"] != "u000" || u.LimitRate != 2 || len(u.Clients) != 1 || u.MoreClients != 0 {
		t.Errorf("u000's division: %+v", u)
	}
	_, page := call(t, nil, http.MethodGet, base+"/", "", "Accept", "text/html")
	body := page[strings.Index(page, `<tbody id="divisions">`):]
	body = body[:strings.Index(body, "</tbody>")]
	if n := strings.Count(body, "<tr>"); n != admin.DivisionsOnPage || !strings.Contains(body, "<code>q.tier_*</code>") ||
		!strings.Contains(body, "tier=a") || !strings.Contains(body, "and 2 more") || !strings.Contains(body, "user=u000") ||
		strings.Contains(body, fmt.Sprintf("user=u%03d", users-1)) {
		t.Errorf("the page's divisions: %d rows\n%s", n, body)
	}
	if !strings.Contains(page, `<p class="muted" id="moreDivisions">4 more divisions not shown`) {
		t.Errorf("the page does not say how many divisions it left out")
	}
}
