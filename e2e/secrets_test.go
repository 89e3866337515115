package e2e_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// secretCore is in every secret of these tests, and URL escaping leaves it
// as it is: no answer and no log line may hold it, in any case.
const secretCore = "s3cr3t"

// Secrets, with characters that URL escaping changes.
var (
	redisSecret    = "Kq8" + secretCore + "Redis/@%"
	sentinelSecret = "Kq8" + secretCore + "Sentinel/@%"
	tokenSecret    = "Kq8" + secretCore + "Token/@%"
)

const secretRules = `domain: sec
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// secretRun is one start of the binary with secrets.
type secretRun struct {
	name  string
	flags []string
	env   map[string]string
	// onArgs: a secret is on the command line, which /stats and
	// /debug/pprof/cmdline must show masked.
	onArgs bool
	// refused: Redis refuses the password given.
	refused bool
}

// TestSecretsNeverPrinted starts the binary with Redis passwords, a
// sentinel password, an xDS token and OTLP credentials, given by flag, by
// FastLimit's and the reference's variables and inside URLs, against
// servers that require them, and reads every admin endpoint (as the
// admin index and pprof's index list them), the admin page, both metrics
// listeners, the HTTP listener's health and the whole log: none holds a
// secret.
func TestSecretsNeverPrinted(t *testing.T) {
	rules := files.Dir(t, map[string]string{"sec.yaml": secretRules})
	r := redistest.StartServer(t)
	requirePass(t, r.Addr, redisSecret)
	withPassword := (&url.URL{Scheme: "redis", User: url.UserPassword("default", redisSecret), Host: r.Addr, Path: "/0"}).String()
	runs := []secretRun{
		{name: "flag", flags: []string{"--redis-url", "redis://" + r.Addr, "--redis-password", redisSecret}, onArgs: true},
		{name: "flag=", flags: []string{"--redis-url", r.Addr, "--redis-username", "default", "--redis-password=" + redisSecret}, onArgs: true},
		{name: "url", flags: []string{"--redis-url", withPassword}, onArgs: true},
		{name: "deprecated flag", flags: []string{"--redis-url", r.Addr, "--redis-auth", "default:" + redisSecret}, onArgs: true},
		{name: "fastlimit env", flags: []string{"--redis-url", r.Addr}, env: map[string]string{"REDIS_PASSWORD": redisSecret}},
		{name: "url env", env: map[string]string{"REDIS_URL": withPassword}},
		{name: "reference env", env: map[string]string{"REDIS_URL": r.Addr, "REDIS_AUTH": redisSecret}},
		{name: "wrong password", flags: []string{"--redis-url", r.Addr, "--redis-password", "wrong" + redisSecret}, onArgs: true, refused: true},
		{name: "otlp", flags: []string{"--redis-url", withPassword, "--tracing"}, onArgs: true, env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otlp:" + url.QueryEscape(tokenSecret) + "@" + loopback.Addr(t),
			"OTEL_EXPORTER_OTLP_HEADERS":  "Authorization Bearer " + tokenSecret, // malformed: the SDK complains
			"OTEL_BSP_SCHEDULE_DELAY":     "100",
			"OTEL_EXPORTER_OTLP_TIMEOUT":  "500",
		}},
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) { checkSecretRun(t, rules, run) })
	}

	t.Run("xds token", func(t *testing.T) {
		addr, set, cp := startControlPlane(t, nil)
		set("v1", xdsRules(3))
		checkSecretRun(t, "", secretRun{flags: []string{"--config-type", "GRPC_XDS_SOTW", "--xds-node-id", xdsNodeID, "--xds-server", addr,
			"--xds-headers", "x-tenant:a,authorization:Bearer " + tokenSecret, "--redis-url", withPassword}, onArgs: true})
		if h := cp.Headers(); len(h) == 0 || strings.Join(h[0].Get("authorization"), "") != "Bearer "+tokenSecret {
			t.Errorf("the xDS server got headers %v, want the token", h)
		}
	})

	t.Run("sentinel", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		requireSentinelPass(t, s, redisSecret, sentinelSecret)
		for _, run := range []secretRun{
			{name: "flags", flags: []string{"--redis-type", "sentinel", "--redis-url", s.URL(), "--redis-password", redisSecret,
				"--redis-sentinel-password", sentinelSecret}, onArgs: true},
			{name: "reference env", env: map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": s.URL(), "REDIS_AUTH": redisSecret,
				"REDIS_SENTINEL_AUTH": sentinelSecret}},
		} {
			t.Run(run.name, func(t *testing.T) { checkSecretRun(t, rules, run) })
		}
	})

	t.Run("errors", func(t *testing.T) {
		checkSecretErrors(t, rules, r.Addr)
	})
}

// checkSecretRun starts the binary as run says (on rules, or over xDS
// when rules is ""), reads every surface, stops it and checks its answers
// and its log.
func checkSecretRun(t *testing.T, rules string, run secretRun) {
	admin, prom := loopback.Addr(t), loopback.Addr(t)
	flags := append([]string{"--admin-addr", admin, "--pprof", "--prometheus", "--prometheus-addr", prom, "--top-keys", "10"}, run.flags...)
	srv := start(t, launch{rules: rules, flags: flags, env: run.env})
	ctx := ctxTimeout(t, 30*time.Second)
	for range 6 { // over the limit once, for the page's top identifiers
		resp, err := srv.Client.ShouldRateLimit(ctx, domainRequest("sec", "alice", "k"))
		if run.refused != (err != nil) {
			t.Fatalf("decision: %v, %v (Redis refuses the password: %t)", resp, err, run.refused)
		}
	}
	if rules == "" {
		if resp, err := srv.Client.ShouldRateLimit(ctx, domainRequest("xds", "alice", "user")); err != nil || resp.OverallCode != rls.RateLimitResponse_OK {
			t.Fatalf("decision on the xDS rules: %v, %v", resp, err)
		}
	}

	answers := crawlAdmin(t, admin)
	for _, u := range []string{"http://" + prom + "/metrics", "http://" + srv.HTTP + "/healthcheck", "http://" + srv.HTTP + "/ready"} {
		answers[u] = fetch(t, http.MethodGet, u, "", "")
	}
	srv.Stop()
	answers["the log"] = srv.logs.String()
	for where, body := range answers {
		if i := strings.Index(strings.ToLower(body), secretCore); i >= 0 {
			t.Errorf("%s shows a secret: …%s…", where, body[max(i-80, 0):min(i+80, len(body))])
		}
	}
	if len(answers) < 25 {
		t.Errorf("read %d surfaces, want every admin endpoint and pprof's profiles", len(answers))
	}
	if run.onArgs {
		for _, u := range []string{"/stats", "/debug/pprof/cmdline?debug=1"} {
			if body := answers["http://"+admin+u]; !strings.Contains(body, "xxxxx") {
				t.Errorf("%s does not show the masked command line:\n%s", u, body)
			}
		}
	}
}

// hrefRE finds the links of pprof's index.
var hrefRE = regexp.MustCompile(`href='([^']+)'`)

// crawlAdmin reads every endpoint the admin index lists, each profile
// pprof's index links, and the admin page; it returns each answer by URL.
func crawlAdmin(t *testing.T, admin string) map[string]string {
	t.Helper()
	base := "http://" + admin
	got := map[string]string{}
	index := fetch(t, http.MethodGet, base+"/", "", "")
	got[base+"/"] = index
	got[base+"/ (page)"] = fetch(t, http.MethodGet, base+"/", "text/html", "")
	_, lines, _ := strings.Cut(index, "\n") // after the status line
	for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
		path, help, ok := strings.Cut(line, ": ")
		if !ok || !strings.HasPrefix(path, "/") {
			t.Fatalf("admin index line %q", line)
		}
		u := base + path + profileQuery(path)
		got[u] = fetch(t, http.MethodGet, u, "", "")
		if strings.HasPrefix(help, "POST: ") {
			got[u+" (POST)"] = fetch(t, http.MethodPost, u, "", `{"domain":"sec","descriptors":[{"entries":[{"key":"k","value":"alice"}]}]}`)
		}
	}
	links := hrefRE.FindAllStringSubmatch(got[base+"/debug/pprof/"], -1)
	if len(links) < 8 {
		t.Errorf("pprof's index links %d profiles:\n%s", len(links), got[base+"/debug/pprof/"])
	}
	for _, m := range links {
		name, _, _ := strings.Cut(m[1], "?")
		u := base + "/debug/pprof/" + name + profileQuery(name)
		if _, done := got[u]; !done {
			got[u] = fetch(t, http.MethodGet, u, "", "")
		}
	}
	for _, q := range []string{"/v1/usage?domain=sec&descriptor=k=alice", "/v1/top?domain=sec", "/v1/status/rules?q=sec"} {
		got[base+q] = fetch(t, http.MethodGet, base+q, "", "")
	}
	return got
}

// profileQuery keeps CPU profiles and traces short, and asks the other
// profiles for text.
func profileQuery(path string) string {
	switch {
	case strings.HasSuffix(path, "profile"), strings.HasSuffix(path, "trace"):
		return "?seconds=1"
	case strings.HasPrefix(path, "/debug/pprof/") && path != "/debug/pprof/", !strings.HasPrefix(path, "/"):
		return "?debug=1"
	}
	return ""
}

// fetch returns the answer, status line included, to method at u with an
// Accept header and a body (both optional).
func fetch(t *testing.T, method, u, accept, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status + "\n" + string(b)
}

// checkSecretErrors checks the starts that fail on a setting holding a
// secret, `fastlimit check`, and the operators' commands: none prints it.
func checkSecretErrors(t *testing.T, rules, redisAddr string) {
	admin := loopback.Addr(t)
	start(t, launch{rules: rules, flags: []string{"--admin-addr", admin, "--redis-url", redisAddr, "--redis-password", redisSecret}})
	ops := "http://ops:" + url.QueryEscape(tokenSecret) + "@" + admin
	cases := []struct {
		name  string
		env   map[string]string
		args  []string
		shows string // the output must hold it: the masked value
	}{
		{"bad port", nil, []string{"--redis-url", "redis://:" + redisSecret + "@127.0.0.1:notaport"}, "xxxxx"},
		{"cluster seed", nil, []string{"--redis-type", "cluster", "--redis-url", "default:" + redisSecret + "@127.0.0.1:1"}, "xxxxx@127.0.0.1:1"},
		{"stray argument", nil, []string{"--redis-url", "127.0.0.1:1", "redis://:" + redisSecret + "@127.0.0.1:1"}, "unexpected argument"},
		{"xds server", nil, []string{"--config-type", "GRPC_XDS_SOTW", "--xds-server", "http://u:" + redisSecret + "@127.0.0.1:1"}, "u:xxxxx@"},
		{"xds headers", nil, []string{"--config-type", "GRPC_XDS_SOTW", "--xds-headers", "Bearer " + tokenSecret}, "entry 1"},
		{"check", map[string]string{"REDIS_PASSWORD": redisSecret, "REDIS_URL": "redis://:" + redisSecret + "@127.0.0.1:1"},
			[]string{"check", "--config", rules}, "OK"},
		{"check with a server flag", nil, []string{"check", "--config", rules, "--redis-password", redisSecret}, "not defined"},
		{"ops usage", nil, []string{"usage", "--admin", ops, "--domain", "sec", "--descriptor", "k=alice"}, "ops:xxxxx@"},
		{"ops explain", nil, []string{"explain", "--admin", ops + "," + ops, "--domain", "sec", "--descriptor", "k=alice"}, "agree"},
		{"ops unreachable", nil, []string{"top", "--admin", "http://ops:" + url.QueryEscape(tokenSecret) + "@" + loopback.Addr(t), "--domain", "sec"}, "ops"},
		{"ops help", map[string]string{"FASTLIMIT_ADMIN": ops}, []string{"top", "-h"}, "ops:xxxxx@"},
		{"ops stray argument", nil, []string{"top", "--domain", "sec", ops}, "unexpected argument"},
	}
	for _, tc := range cases {
		out, err := runToExit(tc.env, tc.args...)
		if strings.Contains(strings.ToLower(out), secretCore) {
			t.Errorf("%s (%v) shows a secret:\n%s", tc.name, err, out)
		}
		if !strings.Contains(out, tc.shows) {
			t.Errorf("%s (%v): the output lacks %q:\n%s", tc.name, err, tc.shows, out)
		}
	}
}

// requirePass makes the Redis at addr ask for pw; its replicas, if any,
// authenticate with it first.
func requirePass(t testing.TB, addr, pw string, replicas ...string) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	for _, a := range append(replicas, addr) {
		c := redis.NewClient(&redis.Options{Addr: a})
		for _, kv := range [][2]string{{"masterauth", pw}, {"requirepass", pw}} {
			if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatalf("CONFIG SET %s on %s: %v", kv[0], a, err)
			}
		}
		_ = c.Close()
	}
}

// requireSentinelPass makes the master and replicas of s ask for pw, and
// the sentinels, which then authenticate to them with pw, ask for
// sentinelPW.
func requireSentinelPass(t testing.TB, s *redistest.Sentinel, pw, sentinelPW string) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	master := s.Master(t)
	sentinels := strings.Split(s.URL(), ",")[1:]
	for _, a := range sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: a})
		if err := c.Set(ctx, redistest.MasterName, "auth-pass", pw).Err(); err != nil {
			t.Fatalf("SENTINEL SET auth-pass on %s: %v", a, err)
		}
		_ = c.Close()
	}
	mc := redis.NewClient(&redis.Options{Addr: master})
	info, err := mc.Info(ctx, "replication").Result()
	_ = mc.Close()
	if err != nil {
		t.Fatal(err)
	}
	var replicas []string
	for _, m := range regexp.MustCompile(`slave\d+:ip=([^,]+),port=(\d+)`).FindAllStringSubmatch(info, -1) {
		replicas = append(replicas, m[1]+":"+m[2])
	}
	if len(replicas) == 0 {
		t.Fatalf("no replicas in the master's INFO:\n%s", info)
	}
	requirePass(t, master, pw, replicas...)
	for _, a := range sentinels {
		c := redis.NewClient(&redis.Options{Addr: a})
		if err := c.Do(ctx, "ACL", "SETUSER", "default", "on", "resetpass", ">"+sentinelPW).Err(); err != nil {
			t.Fatalf("ACL SETUSER on sentinel %s: %v", a, err)
		}
		_ = c.Close()
	}
}
