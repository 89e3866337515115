package opsctl_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/opsctl"
	"github.com/fastlimit/fastlimit/internal/server"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

// rules are a window per ip and a bucket per gold user.
//
//go:embed testdata/edge.yaml
var rules string

// replica is a server on the embedded store, its admin address and its
// HTTP address.
type replica struct{ admin, http string }

func startReplica(t *testing.T, args ...string) replica {
	t.Helper()
	dir := files.Dir(t, map[string]string{"edge.yaml": rules})
	o, err := settings.Parse("test", append([]string{"--config", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--admin-addr", "127.0.0.1:0", "--drain", "0s"}, args...), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(o, zaptest.NewLogger(t), prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return replica{admin: s.AdminAddr(), http: s.HTTPAddr()}
}

// decide posts a one-descriptor request to r's /json n times.
func (r replica) decide(t *testing.T, n int, kv ...string) {
	t.Helper()
	var es []map[string]string
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, map[string]string{"key": kv[i], "value": kv[i+1]})
	}
	b, err := json.Marshal(map[string]any{"domain": "edge", "descriptors": []any{map[string]any{"entries": es}}})
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	for range n {
		resp, err := http.Post("http://"+r.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// run runs a command and returns its exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := opsctl.Commands[args[0]](args[1:], func(string) string { return "" }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestTopMerges: top asks every replica and merges: counts add up, the
// most limited identifier first, as a table and as JSON.
func TestTopMerges(t *testing.T) {
	a, b := startReplica(t), startReplica(t)
	a.decide(t, 5, "ip", "1.1.1.1")
	b.decide(t, 4, "ip", "1.1.1.1")
	b.decide(t, 3, "ip", "2.2.2.2")
	admins := a.admin + "," + b.admin
	code, out, errs := run(t, "top", "--admin", admins, "--domain", "edge", "--json")
	if code != opsctl.ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m top.Answer
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if m.Replicas != 2 || len(m.Rules) != 1 || m.Rules[0].Entries[0].Values[0] != "1.1.1.1" || m.Rules[0].Entries[0].Count != 5 {
		t.Errorf("merged: %s", out)
	}
	code, out, _ = run(t, "top", "--admin", admins, "--domain", "edge", "--by", "hits", "-n", "1")
	if code != opsctl.ExitOK || !strings.Contains(out, "2 replicas") || !hasRow(out, "edge.ip hits 1.1.1.1 9 0 ip=1.1.1.1") ||
		strings.Contains(out, "2.2.2.2") || !hasRow(out, "edge.ip hits (any other) <= 3") {
		t.Errorf("table:\n%s", out)
	}
	// Without --domain, every domain's rules.
	if code, out, errs := run(t, "top", "--admin", admins, "--by", "hits"); code != opsctl.ExitOK || !hasRow(out, "edge.ip hits 1.1.1.1 9 0 ip=1.1.1.1") {
		t.Errorf("without --domain: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := run(t, "top", "--admin", a.admin); code != opsctl.ExitOK || !strings.HasPrefix(out, "1 replica,") {
		t.Errorf("one replica: exit %d\n%s", code, out)
	}
	if code, _, _ := run(t, "top", "--admin", a.admin+",127.0.0.1:1", "--domain", "edge"); code != opsctl.ExitError {
		t.Errorf("a replica down: exit %d, want 1", code)
	}
}

// rows counts a table's lines of these fields.
func rows(table, fields string) int {
	n := 0
	for _, l := range strings.Split(table, "\n") {
		if strings.Join(strings.Fields(l), " ") == fields {
			n++
		}
	}
	return n
}

func hasRow(table, fields string) bool { return rows(table, fields) > 0 }

// TestExplainExitCodes: explain exits 3 for a request that would be
// OVER_LIMIT and 0 for one that would pass, charging nothing.
func TestExplainExitCodes(t *testing.T) {
	r := startReplica(t)
	r.decide(t, 2, "ip", "9.9.9.9")
	for _, tc := range []struct {
		ip   string
		code int
	}{{"9.9.9.9", opsctl.ExitLimited}, {"8.8.8.8", opsctl.ExitOK}, {"8.8.8.8", opsctl.ExitOK}} {
		code, out, errs := run(t, "explain", "--admin", r.admin, "--domain", "edge", "--descriptor", "ip="+tc.ip,
			"--descriptor", "plan=gold,user=u")
		if code != tc.code || !strings.Contains(out, "edge.yaml:3") || !strings.Contains(out, "edge.plan_gold.user") {
			t.Errorf("explain ip=%s: exit %d, want %d\n%s%s", tc.ip, code, tc.code, out, errs)
		}
	}
	req := filepath.Join(t.TempDir(), "req.json")
	files.Write(t, req, `{"domain":"edge","descriptors":[{"entries":[{"key":"ip","value":"9.9.9.9"}]}]}`)
	if code, out, _ := run(t, "explain", "--admin", r.admin, "--request", req, "--json"); code != opsctl.ExitLimited ||
		!strings.Contains(out, `"code": "OVER_LIMIT"`) {
		t.Errorf("explain --request --json: exit %d\n%s", code, out)
	}
	if code, _, _ := run(t, "explain", "--admin", r.admin, "--request", req, "--domain", "edge"); code != opsctl.ExitUsage {
		t.Errorf("--request with --domain: exit %d", code)
	}
}

// TestExplainSeveralLimits: of a rule with several limits, explain's
// table has a row for each under the descriptor's, with its label, size,
// what it has left and its keys, the one that decides marked.
func TestExplainSeveralLimits(t *testing.T) {
	r := startReplica(t)
	r.decide(t, 2, "account", "acme")
	code, out, errs := run(t, "explain", "--admin", r.admin, "--domain", "edge", "--descriptor", "account=acme")
	if code != opsctl.ExitLimited {
		t.Fatalf("exit %d, want %d\n%s%s", code, opsctl.ExitLimited, out, errs)
	}
	base := "ratelimit:{edge/account=acme}:default:"
	for _, want := range []string{
		"account=acme OVER_LIMIT edge.account (daily) ",
		"limit 1 of 2 OK edge.account#0 10/HOUR fixed_window 8 of 10 (count 2) " + base,
		"limit 2 of 2 OVER_LIMIT edge.account#daily (decides) 2/DAY fixed_window 0 of 2 (count 2) " + base + "#1:",
	} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			found = found || strings.HasPrefix(strings.Join(strings.Fields(l), " "), want)
		}
		if !found {
			t.Errorf("no row %q in\n%s", want, out)
		}
	}
}

// TestResetAndRefund: reset needs a token; with one it clears the
// descriptor on every replica, by descriptor or by rule and value; refund
// gives hits back on the first replica only.
func TestResetAndRefund(t *testing.T) {
	dir := t.TempDir()
	tokens, mine := filepath.Join(dir, "tokens"), filepath.Join(dir, "mine")
	files.Write(t, tokens, "oncall:t0k-0123456789abcdef\n")
	files.Write(t, mine, "t0k-0123456789abcdef\n")
	a, b := startReplica(t, "--admin-token-file", tokens), startReplica(t, "--admin-token-file", tokens)
	for _, r := range []replica{a, b} {
		r.decide(t, 3, "ip", "5.5.5.5")
	}
	admins := a.admin + "," + b.admin
	if code, _, errs := run(t, "reset", "--admin", admins, "--domain", "edge", "--descriptor", "ip=5.5.5.5"); code != opsctl.ExitError ||
		!strings.Contains(errs, "403") {
		t.Errorf("reset without a token: exit %d %s", code, errs)
	}
	code, out, errs := run(t, "reset", "--admin", admins, "--domain", "edge", "--rule", "edge.ip", "--value", "5.5.5.5", "--token-file", mine)
	if code != opsctl.ExitOK || strings.Count(out, "reset by token:oncall") != 2 || rows(out, "ip=5.5.5.5 edge.ip 0/2 left 2/2 left") != 2 {
		t.Errorf("reset: exit %d\n%s%s", code, out, errs)
	}
	for _, r := range []replica{a, b} {
		r.decide(t, 2, "ip", "5.5.5.5")
	}
	code, out, errs = run(t, "refund", "--admin", admins, "--domain", "edge", "--descriptor", "ip=5.5.5.5", "--hits", "1", "--token-file", tokens)
	if code != opsctl.ExitOK || !hasRow(out, "ip=5.5.5.5 edge.ip 0/2 left 1/2 left") || strings.Contains(out, b.admin) {
		t.Errorf("refund: exit %d\n%s%s", code, out, errs)
	}
	_, page := scrape.Get(t, "http://"+b.admin+"/v1/usage?domain=edge&descriptor=ip=5.5.5.5")
	if !strings.Contains(page, `"remaining":0`) {
		t.Errorf("the second replica was refunded too: %s", page)
	}
	if code, _, _ := run(t, "refund", "--admin", admins, "--domain", "edge", "--descriptor", "ip=5.5.5.5", "--token-file", mine); code != opsctl.ExitUsage {
		t.Errorf("refund without --hits: exit %d", code)
	}
}

// TestUsage: usage prints each replica's state of a descriptor.
func TestUsage(t *testing.T) {
	r := startReplica(t)
	r.decide(t, 1, "plan", "gold", "user", "x,y")
	code, out, errs := run(t, "usage", "--admin", r.admin, "--domain", "edge", "--descriptor", "plan=gold,user=x%2Cy")
	if code != opsctl.ExitOK || !strings.Contains(out, "edge.plan_gold.user") || !strings.Contains(out, "4 tokens") {
		t.Errorf("usage: exit %d\n%s%s", code, out, errs)
	}
	if code, _, _ := run(t, "usage", "--admin", r.admin, "--domain", "edge"); code != opsctl.ExitUsage {
		t.Errorf("usage without a descriptor: exit %d", code)
	}
}

// TestAdminPasswordMasked: a password in --admin is printed masked, in
// tables and in errors, while the requests go to the URL given.
func TestAdminPasswordMasked(t *testing.T) {
	r := startReplica(t)
	code, out, errs := run(t, "usage", "--admin", "http://ops:s3cret@"+r.admin, "--domain", "edge", "--descriptor", "plan=gold,user=x")
	if code != opsctl.ExitOK || !strings.Contains(out, "http://ops:xxxxx@"+r.admin) || strings.Contains(out+errs, "s3cret") {
		t.Errorf("usage: %d\n%s%s", code, out, errs)
	}
	code, out, errs = run(t, "top", "--admin", "http://ops:s3cret@"+r.admin+"/%zz", "--domain", "edge")
	if code != opsctl.ExitUsage || !strings.Contains(errs, "ops:xxxxx@") || strings.Contains(out+errs, "s3cret") {
		t.Errorf("top with a bad --admin: %d\n%s%s", code, out, errs)
	}
}

// TestExitCodes: bad usage exits 2 (the usage says so), -h 0; a replica
// that refuses exits 1, saying why: a rule or domain the rules lack, the
// HTTP port given for the admin listener's.
func TestExitCodes(t *testing.T) {
	r := startReplica(t)
	for _, tc := range []struct {
		args []string
		code int
		err  string // in stderr
	}{
		{[]string{"reset", "--admin", r.admin, "--domain", "edge", "--descriptor", "user"}, opsctl.ExitUsage, `"user" is not key=value`},
		{[]string{"top", "--bogus"}, opsctl.ExitUsage, "flag provided but not defined: -bogus"},
		{[]string{"top", "stray"}, opsctl.ExitUsage, `unexpected argument "stray"`},
		{[]string{"top", "-n", "-1"}, opsctl.ExitUsage, "-n -1"},
		{[]string{"explain", "--hits", "x"}, opsctl.ExitUsage, "invalid value"},
		{[]string{"usage", "--admin", r.admin}, opsctl.ExitUsage, "give --domain"},
		{[]string{"top", "-h"}, opsctl.ExitOK, "Exit codes: 0 ok, 1 a replica failed or refused, 2 bad usage"},
		{[]string{"top", "--admin", r.admin, "--domain", "edge", "--rule", "edge.nope"}, opsctl.ExitError, "no rule edge.nope in domain edge"},
		{[]string{"top", "--admin", r.admin, "--domain", "edgy"}, opsctl.ExitError, "no domain edgy in the rules in force; their domains: edge"},
		{[]string{"top", "--admin", r.http}, opsctl.ExitError, "the admin API is on the admin listener"},
		{[]string{"usage", "--admin", r.http, "--domain", "edge", "--descriptor", "ip=1"}, opsctl.ExitError, "not the HTTP port"},
	} {
		code, _, errs := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.err) {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s\nwant %q in it", tc.args, code, tc.code, errs, tc.err)
		}
	}
}

// TestTerminalEscaped: what clients chose (descriptor values, which
// become identifiers, store keys and Envoy identities) is printed
// escaped: an escape sequence cannot set the terminal's title or fake
// colours, a newline cannot fake a row.
func TestTerminalEscaped(t *testing.T) {
	r := startReplica(t)
	evil := "\x1b]0;pwned\x07\x1b[31mred\nip=1.1.1.1 fake\u202e"
	shown := `\x1b]0;pwned\x07\x1b[31mred\nip=1.1.1.1 fake\u202e`
	r.decide(t, 3, "ip", evil)
	code, out, errs := run(t, "top", "--admin", r.admin, "--domain", "edge")
	if code != opsctl.ExitOK || !strings.Contains(out, shown) || strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Count(out, "\n") != 3 {
		t.Errorf("top: exit %d\n%q%s", code, out, errs)
	}
	code, out, errs = run(t, "explain", "--admin", r.admin, "--domain", "edge", "--descriptor", "ip="+url.QueryEscape(evil))
	if code != opsctl.ExitLimited || !strings.Contains(out, "ip="+shown) || strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Errorf("explain: exit %d\n%q%s", code, out, errs)
	}
	for in, want := range map[string]string{
		"plain": "plain", `a\b`: `a\\b`, "tab\there": `tab\there`, "\xff": `\xff`, "é": "é", "\u0085": `\u0085`, "\r": `\r`,
	} {
		if got := opsctl.Term(in); got != want {
			t.Errorf("term(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestExplainUnknownDomain: explain of a domain the rules lack (a
// misspelt domain, the commonest "my limit does nothing") says so and
// names the domains.
func TestExplainUnknownDomain(t *testing.T) {
	r := startReplica(t)
	code, out, errs := run(t, "explain", "--admin", r.admin, "--domain", "edgy", "--descriptor", "ip=1.1.1.1")
	if code != opsctl.ExitOK || !strings.Contains(out, "domain edgy has no rules in force") || !strings.Contains(out, "Their domains: edge") {
		t.Errorf("explain of an unknown domain: exit %d\n%s%s", code, out, errs)
	}
	if _, out, _ := run(t, "explain", "--admin", r.admin, "--domain", "edge", "--descriptor", "ip=1.1.1.1"); strings.Contains(out, "no rules") {
		t.Errorf("explain of a known domain:\n%s", out)
	}
}

// TestTokenOverPlainHTTP: a token that would go over plain http to
// another host is warned of; to loopback it is not.
func TestTokenOverPlainHTTP(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "tok")
	files.Write(t, tok, "t0k-0123456789abcdef\n")
	_, _, errs := run(t, "top", "--admin", "192.0.2.1:6070", "--timeout", "100ms", "--token-file", tok)
	if !strings.Contains(errs, "warning: the token goes to http://192.0.2.1:6070 over plain http") {
		t.Errorf("a token to another host over http: stderr\n%s", errs)
	}
	for _, admin := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1", "https://192.0.2.1:6070"} {
		if _, _, errs := run(t, "top", "--admin", admin, "--timeout", "100ms", "--token-file", tok); strings.Contains(errs, "warning") {
			t.Errorf("--admin %s: stderr\n%s", admin, errs)
		}
	}
	if _, _, errs := run(t, "top", "--admin", "192.0.2.1:6070", "--timeout", "100ms"); strings.Contains(errs, "warning") {
		t.Errorf("no token: stderr\n%s", errs)
	}
}

// TestEveryReplicaByName: dns:///name:port addresses every address the
// name resolves to, as a headless Service's does: a reset reaches each
// replica.
func TestEveryReplicaByName(t *testing.T) {
	a := startReplica(t)
	_, port, _ := net.SplitHostPort(a.admin)
	b := startReplica(t, "--admin-addr", "127.0.0.2:"+port)
	defer opsctl.SetLookupHost(func(_ context.Context, host string) ([]string, error) {
		if host != "rl-fastlimit-admin.limits.svc" {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []string{"127.0.0.2", "127.0.0.1"}, nil
	})()
	for _, r := range []replica{a, b} {
		r.decide(t, 3, "ip", "6.6.6.6")
	}
	admin := "dns:///rl-fastlimit-admin.limits.svc:" + port
	code, out, errs := run(t, "top", "--admin", admin, "--domain", "edge", "--json")
	var m top.Answer
	if code != opsctl.ExitOK || json.Unmarshal([]byte(out), &m) != nil || m.Replicas != 2 || m.Rules[0].Entries[0].Count != 2 {
		t.Errorf("top of every replica by name: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := run(t, "top", "--admin", "dns:///elsewhere:1"); code != opsctl.ExitError || !strings.Contains(errs, "no such host elsewhere") {
		t.Errorf("a name that does not resolve: exit %d %s", code, errs)
	}
	if code, _, _ := run(t, "top", "--admin", "dns:///no-port"); code != opsctl.ExitUsage {
		t.Errorf("dns:/// without a port: exit %d", code)
	}
}
