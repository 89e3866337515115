package e2e_test

import (
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// opsRules are the operators' tests' rules: a fixed window, a sliding
// one under a wildcard and a bucket.
//
//go:embed testdata/ops.yaml
var opsRules string

// startOps starts a server on opsRules with its admin listener on a known
// address, and returns it and that address.
func startOps(t *testing.T, dir string, extra ...string) (*fastlimit, string) {
	t.Helper()
	admin := loopback.Addr(t)
	return startServer(t, dir, true, append(extra, "--admin-addr", admin)...), admin
}

// command runs a subcommand of the binary and returns its exit code and
// output.
func command(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := runToExit(nil, args...)
	if err == nil {
		return 0, out
	}
	if exit, ok := err.(interface{ ExitCode() int }); ok { // an *exec.ExitError
		return exit.ExitCode(), out
	}
	t.Fatalf("%v: %v\n%s", args, err, out)
	return 0, ""
}

// TestOpsTopAcrossReplicas: three replicas on one Redis; one customer
// hammered past its limit among 100,000 others: fastlimit top over the
// three names it first with the replicas' counts merged, and each
// replica's log names it.
func TestOpsTopAcrossReplicas(t *testing.T) {
	r := redistest.StartServer(t)
	dir := files.Dir(t, map[string]string{"ops.yaml": opsRules})
	var servers []*fastlimit
	var admins []string
	for range 3 {
		srv, admin := startOps(t, dir, "--redis-url", "redis://"+r.Addr+"/0")
		servers, admins = append(servers, srv), append(admins, admin)
	}
	ctx := ctxTimeout(t, 2*time.Minute)
	run := fmt.Sprint(time.Now().UnixNano())
	hot := "hot-" + run
	// 100,000 customers hit once, 100 descriptors a request, and the hot
	// one 3,000 times: 5 allowed, 2,995 over its limit. With 3 % of the
	// hits (over 1/--top-keys) it is sure to rank first by hits too.
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			for i := w; i < 1000; i += 8 {
				req := requestIn("ops")
				for j := range 100 {
					req.Descriptors = append(req.Descriptors, desc("customer", fmt.Sprintf("c%s-%d", run, i*100+j)))
				}
				if i%10 < 3 {
					for range 10 {
						req.Descriptors = append(req.Descriptors, desc("customer", hot))
					}
				}
				if _, err := servers[i%3].Client.ShouldRateLimit(ctx, req); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, by := range []string{"over_limit", "hits"} {
		code, out := command(t, "top", "--admin", strings.Join(admins, ","), "--domain", "ops", "--by", by, "-n", "5", "--json")
		if code != 0 {
			t.Fatalf("top --by %s: exit %d\n%s", by, code, out)
		}
		var a top.Answer
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		want := map[string]float64{"over_limit": 2995, "hits": 3000}[by]
		if a.Replicas != 3 || len(a.Rules) != 1 || len(a.Rules[0].Entries) == 0 {
			t.Fatalf("top --by %s: %s", by, out)
		}
		// Counts decay (e^(-t/5m)): a minute of test keeps more than 80 %.
		first := a.Rules[0].Entries[0]
		if first.Values[0] != hot || first.Count > want+first.Error+0.5 || first.Count < 0.8*want {
			t.Errorf("top --by %s: first %+v, want %s with about %v", by, first, hot, want)
		}
	}
	code, table := command(t, "top", "--admin", strings.Join(admins, ","), "--domain", "ops")
	if code != 0 || !strings.Contains(table, "3 replicas") || !strings.Contains(table, hot) {
		t.Errorf("top table: exit %d\n%s", code, table)
	}
	for i, srv := range servers {
		if !wait.True(10*time.Second, func() bool {
			logs := srv.logs.String()
			return strings.Contains(logs, "top over-limit identifiers") && strings.Contains(logs, hot)
		}) {
			t.Errorf("replica %d did not log the top over-limit identifiers", i)
		}
	}
}

// TestOpsExplain: explain of an Envoy-shaped request of three descriptors
// names each rule's file and line and the code the request would get, and
// charges nothing: the next request sees the remaining explain saw.
func TestOpsExplain(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		dir := files.Dir(t, map[string]string{"ops.yaml": opsRules})
		srv, admin := startOps(t, dir, extra...)
		ctx := ctxTimeout(t, 30*time.Second)
		id := fmt.Sprint(time.Now().UnixNano())
		req := requestIn("ops", desc("customer", id), desc("route", "/api/v1", "user", id), desc("api_key", id))
		for range 5 {
			if _, err := srv.Client.ShouldRateLimit(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		body := fmt.Sprintf(`{"domain":"ops","descriptors":[{"entries":[{"key":"customer","value":%[1]q}]},
			{"entries":[{"key":"route","value":"/api/v1"},{"key":"user","value":%[1]q}]},{"entries":[{"key":"api_key","value":%[1]q}]}]}`, id)
		path := filepath.Join(t.TempDir(), "request.json")
		files.Write(t, path, body)
		file := filepath.Join(dir, "ops.yaml")
		for range 2 {
			code, out := command(t, "explain", "--admin", admin, "--request", path)
			if code != 3 || !strings.Contains(out, "would be OVER_LIMIT") {
				t.Fatalf("explain: exit %d, want 3 (OVER_LIMIT)\n%s", code, out)
			}
			for _, want := range []string{file + ":3", file + ":8", file + ":10", "0 of 5 (count 5)", "95 of 100", "15 tokens"} {
				if !strings.Contains(out, want) {
					t.Errorf("explain lacks %q:\n%s", want, out)
				}
			}
		}
		resp, err := srv.Client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].LimitRemaining != 94 || resp.Statuses[2].LimitRemaining != 14 {
			t.Errorf("the request after two explains: %v", resp)
		}
		code, out := command(t, "explain", "--admin", admin, "--domain", "ops", "--descriptor", "api_key="+id+"-new", "--json")
		if code != 0 || !strings.Contains(out, `"code": "OK"`) {
			t.Errorf("explain of a request that would pass: exit %d\n%s", code, out)
		}
	})
}

// TestOpsResetOnCluster: a customer limited on a Redis Cluster is reset:
// without a token the API answers 403 and the command fails; with one the
// command resets, the audit line is written, and the next request is OK.
func TestOpsResetOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	files.Write(t, tokens, "oncall:e2e-secret-0123456789\n")
	mine := filepath.Join(t.TempDir(), "mine")
	files.Write(t, mine, "e2e-secret-0123456789\n")
	srv, admin := startOps(t, files.Dir(t, map[string]string{"ops.yaml": opsRules}),
		"--redis-type", "CLUSTER", "--redis-url", c.Seeds(), "--store-timeout", "5s", "--admin-token-file", tokens)
	ctx := ctxTimeout(t, time.Minute)
	id := fmt.Sprint(time.Now().UnixNano())
	req := requestIn("ops", desc("customer", id), desc("api_key", id))
	for range 21 {
		if _, err := srv.Client.ShouldRateLimit(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := srv.Client.ShouldRateLimit(ctx, req); err != nil || resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("before the reset: %v, %v", resp, err)
	}
	resetBody := fmt.Sprintf(`{"domain":"ops","descriptors":[{"entries":[{"key":"customer","value":%[1]q}]},{"entries":[{"key":"api_key","value":%[1]q}]}]}`, id)
	resp, err := http.Post("http://"+admin+"/v1/counters/reset", "application/json", strings.NewReader(resetBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("reset without a token: %d, want 403", resp.StatusCode)
	}
	if code, out := command(t, "reset", "--admin", admin, "--domain", "ops", "--descriptor", "customer="+id); code != 1 || !strings.Contains(out, "403") {
		t.Errorf("fastlimit reset without a token: exit %d\n%s", code, out)
	}
	code, out := command(t, "reset", "--admin", admin, "--domain", "ops", "--descriptor", "customer="+id,
		"--descriptor", "api_key="+id, "--token-file", mine)
	if code != 0 || !strings.Contains(out, "reset by token:oncall") || !strings.Contains(out, "0/5 left  5/5 left") {
		t.Fatalf("fastlimit reset: exit %d\n%s", code, out)
	}
	if resp, err := srv.Client.ShouldRateLimit(ctx, req); err != nil || resp.OverallCode != rls.RateLimitResponse_OK ||
		resp.Statuses[0].LimitRemaining != 4 || resp.Statuses[1].LimitRemaining != 19 {
		t.Errorf("after the reset: %v, %v", resp, err)
	}
	logs := srv.logs.String()
	if !strings.Contains(logs, "admin write") || !strings.Contains(logs, `"who": "token:oncall"`) ||
		!strings.Contains(logs, "ops.customer: count 5, 0/5 left") || strings.Contains(logs, "e2e-secret") {
		t.Errorf("audit line missing, or the token logged:\n%s", logs)
	}
}

// TestOpsWarnLines: a store that does not answer and a full embedded
// store each write a warn line with the cause, not one per request; a
// DELETE of /v1/usage answers 405.
func TestOpsWarnLines(t *testing.T) {
	for _, tc := range []struct {
		name, cause string
		flags       []string
	}{
		{"store failure", "store error", []string{"--redis-url", "redis://" + loopback.Addr(t) + "/0", "--breaker-failures", "1000000"}},
		{"memory full", "memory store full", []string{"--memory-max-keys", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, admin := startOps(t, files.Dir(t, map[string]string{"ops.yaml": opsRules}), tc.flags...)
			ctx := ctxTimeout(t, 30*time.Second)
			start := time.Now()
			for i := range 50 {
				_, err := srv.Client.ShouldRateLimit(ctx, requestIn("ops", desc("customer", fmt.Sprint("c", i))))
				if status.Code(err) != codes.Unavailable && i > 0 {
					t.Fatalf("request %d: %v, want Unavailable", i, err)
				}
			}
			took := time.Since(start)
			var lines []string
			for _, l := range strings.Split(srv.logs.String(), "\n") {
				if strings.Contains(l, "store failure: answered by --on-store-error") {
					lines = append(lines, l)
				}
			}
			if len(lines) == 0 || len(lines) > 1+int(took/time.Second) || !strings.Contains(lines[0], `"cause": "`+tc.cause+`"`) ||
				!strings.Contains(lines[0], "WARN") {
				t.Errorf("%d warn lines for 49 failures in %s, want one a second with cause %q:\n%s", len(lines), took, tc.cause, strings.Join(lines, "\n"))
			}
			req, _ := http.NewRequest(http.MethodDelete, "http://"+admin+"/v1/usage?domain=ops&descriptor=customer=a", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("DELETE /v1/usage: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
			}
		})
	}
}

// updateDocs rewrites the docs' log examples from the binary's output
// (TestLogExamples).
var updateDocs = flag.Bool("update", false, "rewrite the log examples of docs/operations.md and docs/security.md")

// logDocs are the docs whose log examples TestLogExamples keeps.
var logDocs = []string{"../docs/operations.md", "../docs/security.md"}

// logExample is a log example of the docs: a marker naming the line,
// then a fenced block of the line alone.
var logExample = regexp.MustCompile("(<!-- log: ([a-z-]+) [^>]*-->\n *```\n *)([^\n]*)(\n *```)")

// TestLogExamples: the log lines the docs show are the binary's own, in
// its JSON format (the chart's and the reference's default), only their
// times, addresses and paths made up: alerts copied from the docs match
// what the binary writes. -update rewrites them.
func TestLogExamples(t *testing.T) {
	edge := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
	dir := files.Dir(t, map[string]string{"edge.yaml": edge})
	tokens := filepath.Join(t.TempDir(), "tokens")
	files.Write(t, tokens, "oncall:"+logToken+"\n")
	srv, admin := startOps(t, dir, "--log-format", "json", "--admin-token-file", tokens, "--memory-max-keys", "2")
	ctx := ctxTimeout(t, time.Minute)
	decide := func(ip string) {
		t.Helper()
		if _, err := srv.Client.ShouldRateLimit(ctx, requestIn("edge", desc("remote_address", ip))); err != nil && status.Code(err) != codes.Unavailable {
			t.Fatal(err)
		}
	}
	for range 5 { // 3 allowed, 2 over the limit
		decide("10.0.0.7")
	}
	post := func(path, body, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+admin+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	reset := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.7"}]}]}`
	// The top line comes within a second of the first over-limit hit:
	// before the reset, which forgets nothing of the top identifiers.
	lines := map[string]string{}
	grab := func(name, message string) bool {
		for _, l := range strings.Split(srv.logs.String(), "\n") {
			if strings.Contains(l, `"@message":"`+message+`"`) {
				lines[name] = l
				return true
			}
		}
		return false
	}
	if !wait.True(30*time.Second, func() bool { return grab("top", "top over-limit identifiers") }) {
		t.Fatalf("no top line:\n%s", srv.logs.String())
	}
	if code := post("/v1/counters/reset", reset, logToken); code != http.StatusOK {
		t.Fatalf("reset: %d", code)
	}
	if code := post("/v1/counters/reset", reset, "wrong-0123456789abcdef"); code != http.StatusForbidden {
		t.Fatalf("reset with a wrong token: %d", code)
	}
	for _, ip := range []string{"10.0.0.8", "10.0.0.9", "10.0.0.10"} { // the embedded store holds 2 keys
		decide(ip)
	}
	files.Replace(t, tokens, "oncall:"+logToken+"\nbob\n")
	if code := post("/v1/counters/reset", reset, logToken); code != http.StatusForbidden {
		t.Fatalf("reset under a malformed token file: %d", code)
	}
	for name, message := range map[string]string{
		"audit": "admin write", "refused": "admin request refused", "store-failure": "store failure: answered by --on-store-error",
		"token-file-refused": "admin token file refused: no token is in force until it is mended",
	} {
		if !wait.True(10*time.Second, func() bool { return grab(name, message) }) {
			t.Errorf("no %s line (%q) in the log:\n%s", name, message, srv.logs.String())
		}
	}
	for name, l := range lines {
		l = regexp.MustCompile(`"@timestamp":"[^"]*"`).ReplaceAllString(l, `"@timestamp":"2026-03-02T10:15:04.512Z"`)
		l = regexp.MustCompile(`"remote":"127\.0\.0\.1:[0-9]+"`).ReplaceAllString(l, `"remote":"10.1.2.3:51522"`)
		l = strings.ReplaceAll(l, tokens, "/etc/fastlimit/admin-tokens/tokens")
		if name == "top" { // 2 over-limit hits, decayed by however long the line took on a busy machine
			l = regexp.MustCompile(`"10\.0\.0\.7 \([0-9.]+\)"`).ReplaceAllString(l, `"10.0.0.7 (2)"`)
		}
		lines[name] = strings.ReplaceAll(l, dir, "/rules")
	}
	shown := map[string]bool{}
	for _, doc := range logDocs {
		old := string(files.Read(t, doc))
		updated := logExample.ReplaceAllStringFunc(old, func(m string) string {
			g := logExample.FindStringSubmatch(m)
			name := g[2]
			shown[name] = true
			want, ok := lines[name]
			if !ok {
				t.Errorf("%s: a log example %q that the test does not write", doc, name)
				return m
			}
			if g[3] != want && !*updateDocs {
				t.Errorf("%s: log example %s is not the binary's line (go test ./e2e -run TestLogExamples -update):\n got %s\nwant %s", doc, name, g[3], want)
			}
			return g[1] + want + g[4]
		})
		if *updateDocs && updated != old {
			files.Write(t, doc, updated)
		}
	}
	for name := range lines {
		if !shown[name] {
			t.Errorf("no doc shows the %s line", name)
		}
	}
}

// logToken is TestLogExamples' token.
const logToken = "oncall-0123456789abcdef"
