package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// composeExample is the part of docker-compose.yml the example's test
// runs: Envoy's bootstrap and FastLimit's command, environment and rules,
// each read from the file as `docker compose up` would use it.
type composeExample struct {
	envoyYAML []byte // the file mounted at Envoy's -c
	rulesDir  string // the directory mounted at FastLimit's --config
	args      []string
	env       map[string]string
}

// loadComposeExample reads docker-compose.yml at the repository's root.
func loadComposeExample(t *testing.T) composeExample {
	t.Helper()
	var cf struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
	}
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	// mounted maps a path inside a container to the repository's file.
	mounted := func(svc, target string) string {
		t.Helper()
		for _, v := range cf.Services[svc].Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == target {
				return filepath.Join("..", parts[0])
			}
		}
		t.Fatalf("docker-compose.yml: %s mounts nothing at %s", svc, target)
		return ""
	}
	envoy, fl := cf.Services["envoy"], cf.Services["fastlimit"]
	var ex composeExample
	for i, a := range envoy.Command {
		if a == "-c" && i+1 < len(envoy.Command) {
			if ex.envoyYAML, err = os.ReadFile(mounted("envoy", envoy.Command[i+1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < len(fl.Command); i++ {
		a := fl.Command[i]
		if a == "--config" && i+1 < len(fl.Command) {
			ex.rulesDir = mounted("fastlimit", fl.Command[i+1])
			i++
			continue
		}
		ex.args = append(ex.args, a)
	}
	if ex.envoyYAML == nil || ex.rulesDir == "" {
		t.Fatalf("docker-compose.yml: no Envoy -c (%d bytes) or FastLimit --config (%q)", len(ex.envoyYAML), ex.rulesDir)
	}
	ex.env = fl.Environment
	return ex
}

// startExample runs the compose example on loopback: FastLimit as compose
// starts it (its command, and its environment with Redis and the admin
// listener moved to test addresses) on a Redis of the test's own, and
// Envoy on the shipped bootstrap, its addresses substituted and nothing
// else.
func startExample(t *testing.T) (*front, *fastlimit, *envoytest.Upstream) {
	t.Helper()
	ex := loadComposeExample(t)
	r := redistest.StartServer(t)
	env := map[string]string{}
	for k, v := range ex.env {
		env[k] = v
	}
	if env["REDIS_URL"] != "redis://redis:6379/0" || env["ADMIN_ADDR"] == "" {
		t.Fatalf("docker-compose.yml: fastlimit's REDIS_URL %q, ADMIN_ADDR %q: the test substitutes what it no longer finds", env["REDIS_URL"], env["ADMIN_ADDR"])
	}
	env["REDIS_URL"] = "redis://" + r.Addr + "/0"
	admin := loopback.Addr(t)
	delete(env, "ADMIN_ADDR") // the harness's --admin-addr would win: give the test's as a flag
	fl := start(t, launch{rules: ex.rulesDir, env: env, flags: append(ex.args, "--admin-addr", admin)})
	fl.Admin = admin
	up := envoytest.StartUpstream(t, nil)
	f := startFrontOn(t, "example", ex.envoyYAML, "0.0.0.0:10000", map[string]string{
		"echo:80":        up.Addr,
		"fastlimit:8081": fl.GRPC,
	})
	f.cluster = "echo"
	return f, fl, up
}

// readmePolicy returns the RateLimit-Policy the README says /login answers.
func readmePolicy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`RateLimit-Policy: (\"login_per_ip\";[^`]+)`").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md shows no RateLimit-Policy of login_per_ip")
	}
	return string(m[1])
}

var rateLimitHeader = regexp.MustCompile(`^"login_per_ip";r=(\d+);t=(\d+)$`)

// TestEnvoyExampleLogin runs docker-compose.yml's Envoy and FastLimit (on
// Redis) with the shipped envoy.yaml and rules: ten /login requests from
// one client address pass, the eleventh gets Envoy's 429; every answer
// carries the RateLimit-Policy the README shows and a RateLimit header
// counting down, the 429 also Retry-After and x-envoy-ratelimited, and
// none Envoy's own X-RateLimit-* headers (turned off).
func TestEnvoyExampleLogin(t *testing.T) {
	f, fl, _ := startExample(t)
	policy := readmePolicy(t)
	const window = 15 * time.Minute
	attempt(t, f, window, func(c *envoytest.Client) error {
		for i := 1; i <= 11; i++ {
			r, err := f.checked(t, c, http.MethodGet, "/login")
			if err != nil {
				return err
			}
			want := http.StatusOK
			if i == 11 {
				want = http.StatusTooManyRequests
			}
			if r.Code != want {
				return fmt.Errorf("/login %d answered %d, want %d", i, r.Code, want)
			}
			if got := r.Header.Get("RateLimit-Policy"); got != policy {
				return fmt.Errorf("/login %d: RateLimit-Policy %q, want the README's %q", i, got, policy)
			}
			m := rateLimitHeader.FindStringSubmatch(r.Header.Get("RateLimit"))
			if m == nil {
				return fmt.Errorf("/login %d: RateLimit %q, want \"login_per_ip\";r=N;t=S", i, r.Header.Get("RateLimit"))
			}
			remaining, _ := strconv.Atoi(m[1])
			reset, _ := strconv.Atoi(m[2])
			if wantR := max(10-i, 0); remaining != wantR {
				return fmt.Errorf("/login %d: RateLimit r=%d, want %d", i, remaining, wantR)
			}
			if left := time.Until(time.Now().Truncate(window).Add(window)); reset < 1 || time.Duration(reset)*time.Second < left-5*time.Second || time.Duration(reset)*time.Second > left+5*time.Second {
				return fmt.Errorf("/login %d: RateLimit t=%d, want the %v left of the 15-minute window", i, reset, left.Round(time.Second))
			}
			if h := r.Header.Get("X-RateLimit-Limit"); h != "" {
				return fmt.Errorf("/login %d: X-RateLimit-Limit %q, but the example turns Envoy's headers off", i, h)
			}
			if i < 11 {
				continue
			}
			if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra != reset {
				return fmt.Errorf("the 429: Retry-After %q, want the window's end, %d", r.Header.Get("Retry-After"), reset)
			}
			if got := r.Header.Get("X-Envoy-Ratelimited"); got != "true" {
				return fmt.Errorf("the 429: x-envoy-ratelimited %q, want true", got)
			}
		}
		return nil
	})
	if over := series(t, fl, `fastlimit_rule_over_limit_total{domain="edge",rule="login_per_ip"}`); over < 1 {
		t.Errorf("FastLimit counted %v hits over login_per_ip", over)
	}
}

// TestEnvoyExampleDescriptors sends through the shipped envoy.yaml one
// kind of request per client address, together using every action of its
// rate_limits, and checks which descriptor FastLimit decided under which
// rule of the shipped rules (its /v1/top, by hits): the descriptor each
// rule's comment says, and no descriptor that matched no rule.
func TestEnvoyExampleDescriptors(t *testing.T) {
	f, fl, up := startExample(t)
	type send struct {
		method, path string
		hdr          []string
	}
	sends := []send{
		// use_remote_address: the peer's address, whatever the client
		// claims in x-forwarded-for.
		{"GET", "/", []string{"x-forwarded-for: 203.0.113.9"}},
		{"GET", "/", []string{"x-plan: free", "x-api-key: k-free"}},
		{"GET", "/", []string{"x-plan: pro", "x-api-key: k-pro"}},
		{"GET", "/", []string{"x-plan: gold", "x-api-key: k-gold"}},
		{"GET", "/", []string{"x-plan: enterprise", "x-api-key: k-ent"}},
		{"GET", "/", []string{"x-api-key: k-noplan"}}, // one header alone: no (plan, api_key) descriptor
		{"DELETE", "/items/1", nil},
		{"GET", "/login", nil},
	}
	src := make([]string, len(sends))
	for i, s := range sends {
		var r envoytest.Response
		// A call past the filter's 50 ms on a busy machine lets the
		// request through unchecked: send it again (from a new address).
		for try := 1; ; try++ {
			c := f.client(t)
			var err error
			if r, err = f.checked(t, c, s.method, s.path, s.hdr...); err == nil {
				src[i] = c.Source
				break
			} else if try == 3 {
				t.Fatalf("%s %s: %v", s.method, s.path, err)
			}
		}
		if r.Code != http.StatusOK {
			t.Fatalf("%s %s %v: %d", s.method, s.path, s.hdr, r.Code)
		}
	}
	if n := len(up.Seen()); n < len(sends) {
		t.Fatalf("the upstream saw %d requests, want %d", n, len(sends))
	}
	ra := func(i int) string { return "remote_address=" + src[i] }
	want := map[string][]string{
		// (remote_address): every request but pro's, whose key limit
		// replaces it.
		"edge.remote_address":                    {ra(0), ra(1), ra(3), ra(4), ra(5), ra(6), ra(7)},
		"edge.generic_key_global":                {"generic_key=global"},
		"edge.plan_free.api_key":                 {"plan=free,api_key=k-free"},
		"edge.plan_pro.api_key":                  {"plan=pro,api_key=k-pro"},
		"edge.plan.api_key":                      {"plan=gold,api_key=k-gold"},
		"edge.header_match_write.remote_address": {"header_match=write," + ra(6)},
		"edge.route_login.remote_address":        {"route=login," + ra(7)},
	}
	got := topDescriptors(t, fl, "edge")
	for rule, w := range want {
		slices.Sort(w)
		if fmt.Sprint(got[rule]) != fmt.Sprint(w) {
			t.Errorf("rule %s decided %v, want %v", rule, got[rule], w)
		}
	}
	for rule := range got {
		if _, ok := want[rule]; !ok {
			t.Errorf("rule %s decided %v, which no request should reach", rule, got[rule])
		}
	}
	if n := series(t, fl, `fastlimit_unmatched_descriptors_total{domain="edge"}`); n != 0 {
		t.Errorf("%v descriptors matched no rule of edge", n)
	}
}
