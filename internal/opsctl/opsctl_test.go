package opsctl_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"io"
	"net/http"
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
	var es []string
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, `{"key":"`+kv[i]+`","value":"`+kv[i+1]+`"}`)
	}
	body := `{"domain":"edge","descriptors":[{"entries":[` + strings.Join(es, ",") + `]}]}`
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
	if code, _, errs := run(t, "top", "--admin", admins); code != opsctl.ExitUsage || !strings.Contains(errs, "--domain") {
		t.Errorf("without --domain: exit %d %s", code, errs)
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
