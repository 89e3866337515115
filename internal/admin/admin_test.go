package admin_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

func TestUsage(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	base := "http://" + s.AdminAddr() + "/v1/usage?"
	// Spend two hits on win=x and three on bucket=y.
	for range 2 {
		s.decide(t, "adm", "win", "x")
	}
	for range 3 {
		s.decide(t, "adm", "bucket", "y")
	}
	u32 := func(v uint32) *uint32 { return &v }
	cases := []struct {
		query string
		want  admin.Usage
	}{
		{"domain=adm&descriptor=win=x", admin.Usage{Domain: "adm", Descriptor: []admin.Entry{{Key: "win", Value: "x"}}, Matched: true,
			UsageLimit: admin.UsageLimit{Rule: "adm.win", Algorithm: "fixed_window", Unit: "MINUTE", Limit: u32(5), Remaining: u32(3)}}},
		{"domain=adm&descriptor=win=other", admin.Usage{Domain: "adm", Descriptor: []admin.Entry{{Key: "win", Value: "other"}}, Matched: true,
			UsageLimit: admin.UsageLimit{Rule: "adm.win", Algorithm: "fixed_window", Unit: "MINUTE", Limit: u32(5), Remaining: u32(5)}}},
		{"domain=adm&descriptor=bucket=y", admin.Usage{Domain: "adm", Descriptor: []admin.Entry{{Key: "bucket", Value: "y"}}, Matched: true,
			UsageLimit: admin.UsageLimit{Rule: "adm.bucket", Algorithm: "token_bucket", Unit: "HOUR", Limit: u32(1), Tokens: u32(7)}}},
		{"domain=adm&descriptor=free=z", admin.Usage{Domain: "adm", Descriptor: []admin.Entry{{Key: "free", Value: "z"}}, Matched: true,
			UsageLimit: admin.UsageLimit{Rule: "adm.free", Unlimited: true}}},
		{"domain=adm&descriptor=odd=a%2Cb%3Dc", admin.Usage{Domain: "adm", Descriptor: []admin.Entry{{Key: "odd", Value: "a,b=c"}}, Matched: true,
			UsageLimit: admin.UsageLimit{Rule: "adm.odd_a,b=c", Name: "oddity", Algorithm: "fixed_window", Unit: "HOUR", Limit: u32(7), Remaining: u32(7)}, ShadowMode: true}},
		{"domain=adm&descriptor=nope=1", admin.Usage{Domain: "adm", Descriptor: []admin.Entry{{Key: "nope", Value: "1"}}}},
		{"domain=unknown&descriptor=win=x", admin.Usage{Domain: "unknown", Descriptor: []admin.Entry{{Key: "win", Value: "x"}}}},
	}
	for _, tc := range cases {
		code, body := scrape.Get(t, base+tc.query)
		if code != http.StatusOK {
			t.Errorf("%s: %d %s", tc.query, code, body)
			continue
		}
		var got admin.Usage
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: %v: %s", tc.query, err, body)
		}
		// Reset times depend on the clock: check their presence only.
		if (got.ResetMs != nil) != (tc.want.Remaining != nil) || (got.FullInMs != nil) != (tc.want.Tokens != nil) {
			t.Errorf("%s: reset_ms/full_in_ms presence wrong: %s", tc.query, body)
		}
		if tc.want.Tokens != nil && (got.Burst == nil || *got.Burst != 10) {
			t.Errorf("%s: burst missing: %s", tc.query, body)
		}
		got.ResetMs, got.FullInMs, got.Burst = nil, nil, nil
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %s\nwant %+v", tc.query, body, tc.want)
		}
	}
	// Peeking consumed nothing.
	code, body := scrape.Get(t, base+"domain=adm&descriptor=win=x")
	if code != http.StatusOK || !strings.Contains(body, `"remaining":3`) {
		t.Fatalf("after peeks: %d %s", code, body)
	}
}

func TestUsageBadRequests(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	for _, q := range []string{
		"descriptor=win=x",
		"domain=adm",
		"domain=adm&descriptor=",
		"domain=adm&descriptor=win",
		"domain=adm&descriptor=win=%zz",
		"domain=adm&descriptor=win=x&descriptor=win=y",
		"domain=adm&domain=adm&descriptor=win=x",
	} {
		if code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/usage?"+q); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
	// A long key is no bad request: requests are bounded by bytes, not by
	// an entry's length.
	if code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/usage?domain=adm&descriptor="+strings.Repeat("k", 5000)+"=v"); code != http.StatusOK ||
		!strings.Contains(body, `"matched":false`) {
		t.Errorf("a 5000-byte key: %d", code)
	}
	// With --max-entry-bytes, it is.
	capped, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--max-entry-bytes", "4096")
	if code, _ := scrape.Get(t, "http://"+capped.AdminAddr()+"/v1/usage?domain=adm&descriptor="+strings.Repeat("k", 5000)+"=v"); code != http.StatusBadRequest {
		t.Errorf("a 5000-byte key under --max-entry-bytes 4096: %d, want 400", code)
	}
}

// TestRLQSUsage: /v1/quota answers rlqs.Service.Usage as JSON; bad
// queries get 400, and with --rlqs=false the path is not served.
func TestRLQSUsage(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--rlqs")
	base := "http://" + s.AdminAddr() + "/v1/quota?"
	code, body := scrape.Get(t, base+"domain=adm&bucket=win=x")
	var u rlqs.Usage
	if err := json.Unmarshal([]byte(body), &u); err != nil || code != http.StatusOK {
		t.Fatalf("%d %s (%v)", code, body, err)
	}
	want := rlqs.Usage{Domain: "adm", Bucket: map[string]string{"win": "x"}, Matched: true, Rule: "adm.win",
		Assignment: "token_bucket", Clients: []rlqs.UsageClient{}}
	u.LimitRate, u.Burst, u.Key = 0, 0, ""
	if !reflect.DeepEqual(u, want) || !strings.Contains(body, `"clients":[]`) {
		t.Errorf("got %s, want %+v", body, want)
	}
	if code, body := scrape.Get(t, base+"domain=adm&bucket=nope=1"); code != http.StatusOK || !strings.Contains(body, `"assignment":"allow_all"`) {
		t.Errorf("unmatched: %d %s", code, body)
	}
	for _, q := range []string{"domain=adm", "bucket=win=x", "domain=adm&bucket=win",
		"domain=adm&bucket=win=x&bucket=win=y", "domain=adm&domain=adm&bucket=win=x"} {
		if code, body := scrape.Get(t, base+q); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
	off, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--rlqs=false")
	if code, _ := scrape.Get(t, "http://"+off.AdminAddr()+"/v1/quota?domain=adm&bucket=win=x"); code != http.StatusNotFound {
		t.Errorf("with --rlqs=false: %d, want 404", code)
	}
}

// TestRLConfig: /rlconfig is the reference's layout, one line per limit.
func TestRLConfig(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/rlconfig")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	want := `adm.win: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false
adm.bucket: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false
adm.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false
adm.odd_a,b=c: unit=HOUR requests_per_unit=7, shadow_mode: true, quota_mode: false
`
	if body != want {
		t.Fatalf("rlconfig:\n%s\nwant:\n%s", body, want)
	}
}

// TestAdminIndex: "/" and any path the admin listener does not serve list
// its endpoints, "<path>: <help>" sorted by path, as the reference's.
func TestAdminIndex(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	want := `/metrics: FastLimit's Prometheus metrics
/rlconfig: print out the currently loaded configuration for debugging
/stats: print out stats
/v1/counters/refund: POST: {domain, descriptors, hits}: give hits back, as is_negative_hits does (authorized, audited)
/v1/counters/reset: POST: {domain, descriptors} or {domain, rule, values}: clear the descriptor's counters (authorized, audited)
/v1/explain: POST: a RateLimitRequest as /json takes it, or {domain, bucket}: each descriptor's rule, keys and state, charging nothing
/v1/quota: how a quota bucket's limit is divided among Envoys (rate limit quota service)
/v1/rules: the rules in force with FastLimit's fields, their hash and files
/v1/status: the admin page's state as JSON: store, rules reload, top limited identifiers, RLQS
/v1/status/rules: the rules in force with their files and decisions as JSON: ?[q=filter][&offset=N][&limit=N]
/v1/top: the identifiers with the most over-limit hits (or hits) of each rule: ?[domain=D][&rule=R][&by=over_limit|hits][&n=N]
/v1/usage: peek at a descriptor's counter without charging it
`
	for _, path := range []string{"/", "/nothing/here"} {
		code, body := scrape.Get(t, "http://"+s.AdminAddr()+path)
		if code != http.StatusOK || body != want {
			t.Errorf("GET %s: %d\n%s\nwant:\n%s", path, code, body, want)
		}
	}
}

// TestAdminStats: /stats writes the process's expvars as the reference's
// does, "cmdline: [...]" and "memstats: {...}".
func TestAdminStats(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/stats")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("line %q is not <name>: <value>", l)
		}
		lines[k] = v
	}
	var cmdline []string
	var mem struct{ Alloc, NumGC *uint64 }
	if err := json.Unmarshal([]byte(lines["cmdline"]), &cmdline); err != nil || len(cmdline) == 0 {
		t.Errorf("cmdline %q: %v", lines["cmdline"], err)
	}
	if err := json.Unmarshal([]byte(lines["memstats"]), &mem); err != nil || mem.Alloc == nil || mem.NumGC == nil {
		t.Errorf("memstats %q: %v", lines["memstats"], err)
	}
}

// TestRules: /v1/rules lists the rules with FastLimit's fields.
func TestRules(t *testing.T) {
	s, dir := testServer(t, map[string]string{"adm.yaml": adminRules})
	code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/rules")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	want := "# hash " + s.hash(t) + "\n# 1 files, 1 domains, 4 limits\n# file " + filepath.Join(dir, "adm.yaml") + "\n" +
		`adm.win: algorithm=fixed_window unit=MINUTE requests_per_unit=5 unit_multiplier=1 cost=1 shadow_mode=false quota_mode=false
adm.bucket: algorithm=token_bucket unit=HOUR requests_per_unit=1 unit_multiplier=1 burst=10 cost=1 shadow_mode=false quota_mode=false
adm.free: unlimited=true shadow_mode=false quota_mode=false
adm.odd_a,b=c: name=oddity algorithm=fixed_window unit=HOUR requests_per_unit=7 unit_multiplier=1 cost=1 shadow_mode=true quota_mode=false
`
	if body != want {
		t.Fatalf("rlconfig:\n%s\nwant:\n%s", body, want)
	}
}

func TestAdminMetrics(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	s.decide(t, "adm", "win", "x")
	code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	for _, want := range []string{
		`fastlimit_rule_total_hits_total{domain="adm",rule="adm.win"} 1`,
		`fastlimit_requests_total{code="OK"} 1`,
		`fastlimit_config_info{hash="` + s.hash(t) + `"} 1`,
		`fastlimit_config_loads_total{result="success"} 1`,
		`fastlimit_config_last_reload_successful 1`,
		"fastlimit_request_duration_seconds_bucket",
		"go_goroutines",
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	rules := map[string]string{"adm.yaml": adminRules}
	off, _ := testServer(t, rules)
	// Without --pprof the path is not served: it gets the index, as any
	// other path the admin listener does not serve.
	if code, body := scrape.Get(t, "http://"+off.AdminAddr()+"/debug/pprof/"); code != http.StatusOK ||
		strings.Contains(body, "goroutine") || !strings.HasPrefix(body, "/metrics: ") {
		t.Fatalf("pprof without --pprof: %d\n%s", code, body)
	}
	on, _ := testServer(t, rules, "--pprof")
	if code, _ := scrape.Get(t, "http://"+on.AdminAddr()+"/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("pprof with --pprof: %d", code)
	}
	if code, _ := scrape.Get(t, "http://"+on.AdminAddr()+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK {
		t.Fatalf("goroutine profile: %d", code)
	}
}
