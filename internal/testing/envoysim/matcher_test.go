package envoysim_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"

	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3" // the header input, for Any

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
)

// TestKeyNeverCollides: ids that a joined form would confuse, or that
// differ by an empty value, have different keys; the order of a map's
// entries does not matter.
func TestKeyNeverCollides(t *testing.T) {
	for _, pair := range [][2]map[string]string{
		{{"a": "1,b=2"}, {"a": "1", "b": "2"}},
		{{"a": ""}, {}},
		{{"a=b": "c"}, {"a": "b=c"}},
		{{"ab": "c"}, {"a": "bc"}},
	} {
		if envoysim.Key(pair[0]) == envoysim.Key(pair[1]) {
			t.Errorf("%v and %v share a key", pair[0], pair[1])
		}
	}
	if envoysim.Key(map[string]string{"a": "1", "b": "2"}) != envoysim.Key(map[string]string{"b": "2", "a": "1"}) {
		t.Error("the key depends on the map's order")
	}
}

const header = `{"@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput", "header_name": "%s"}`

func input(name string) string { return strings.Replace(header, "%s", name, 1) }

// settings is bucket settings of a builder (JSON), DENY_ALL before the
// first assignment when deny.
func settings(builder string, deny bool) string {
	na := ""
	if deny {
		na = `, "no_assignment_behavior": {"fallback_rate_limit": {"blanket_rule": "DENY_ALL"}}`
	}
	return `{"name": "s", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings",
		"reporting_interval": "5s", "bucket_id_builder": {"bucket_id_builder": ` + builder + `}` + na + `}}`
}

// filterConfig is the tenant matcher of examples/envoy-rlqs in small: a
// non-empty x-tenant on /api is {name: api, tenant: <it>}, any other
// /api request {name: api}, /raw {name: raw, tenant: <x-tenant>} (which
// an absent header fails), /tree by a matcher_tree on x-tier, the rest
// {name: other} through on_no_match.
func filterConfig(t *testing.T) *rlqsv3.RateLimitQuotaFilterConfig {
	t.Helper()
	tenant := `{"custom_value": {"name": "t", "typed_config": ` + input("x-tenant") + `}}`
	path := func(prefix string) string {
		return `{"single_predicate": {"input": {"name": "p", "typed_config": ` + input(":path") + `}, "value_match": {"prefix": "` + prefix + `"}}}`
	}
	js := `{"domain": "d", "rlqs_server": {"envoy_grpc": {"cluster_name": "c"}}, "bucket_matchers": {
		"matcher_list": {"matchers": [
			{"predicate": {"and_matcher": {"predicate": [` + path("/api") + `,
				{"single_predicate": {"input": {"name": "t", "typed_config": ` + input("x-tenant") + `}, "value_match": {"safe_regex": {"google_re2": {}, "regex": ".+"}}}}]}},
			 "on_match": {"action": ` + settings(`{"name": {"string_value": "api"}, "tenant": `+tenant+`}`, false) + `}},
			{"predicate": ` + path("/api") + `, "on_match": {"action": ` + settings(`{"name": {"string_value": "api"}}`, false) + `}},
			{"predicate": ` + path("/raw") + `, "on_match": {"action": ` + settings(`{"name": {"string_value": "raw"}, "tenant": `+tenant+`}`, true) + `}},
			{"predicate": {"not_matcher": {"not_matcher": ` + path("/tree") + `}}, "on_match": {"matcher": {
				"matcher_tree": {"input": {"name": "tier", "typed_config": ` + input("x-tier") + `},
					"exact_match_map": {"map": {"gold": {"action": ` + settings(`{"tier": {"string_value": "gold"}}`, false) + `}}}},
				"on_no_match": {"matcher": {"matcher_tree": {"input": {"name": "tier", "typed_config": ` + input("x-tier") + `},
					"prefix_match_map": {"map": {"s": {"action": ` + settings(`{"tier": {"string_value": "s*"}}`, false) + `}}}}}}}}}
		]},
		"on_no_match": {"action": ` + settings(`{"name": {"string_value": "other"}}`, false) + `}}}`
	var cfg rlqsv3.RateLimitQuotaFilterConfig
	if err := protojson.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// TestMatcher: the matcher and bucket id builder as Envoy's: an absent
// header is no data (no string matcher matches it, and a custom_value of
// it fails the id), an empty one matches "" and leaves its key out.
func TestMatcher(t *testing.T) {
	m, err := envoysim.NewMatcher(filterConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		headers map[string]string
		want    map[string]string // nil: no bucket
	}{
		{map[string]string{":path": "/api/x", "x-tenant": "acme"}, map[string]string{"name": "api", "tenant": "acme"}},
		{map[string]string{":path": "/api/x"}, map[string]string{"name": "api"}},
		{map[string]string{":path": "/api/x", "x-tenant": ""}, map[string]string{"name": "api"}},
		{map[string]string{":path": "/raw", "x-tenant": "acme"}, map[string]string{"name": "raw", "tenant": "acme"}},
		{map[string]string{":path": "/raw", "x-tenant": ""}, map[string]string{"name": "raw"}},
		{map[string]string{":path": "/raw"}, nil},
		{map[string]string{":path": "/tree", "x-tier": "gold"}, map[string]string{"tier": "gold"}},
		{map[string]string{":path": "/tree", "x-tier": "silver"}, map[string]string{"tier": "s*"}},
		{map[string]string{":path": "/tree", "x-tier": "bronze"}, map[string]string{"name": "other"}},
		{map[string]string{":path": "/tree"}, map[string]string{"name": "other"}},
		{map[string]string{":path": "/"}, map[string]string{"name": "other"}},
	} {
		id, _, ok := m.Match(tc.headers)
		if ok != (tc.want != nil) || !maps.Equal(id, tc.want) {
			t.Errorf("%v: bucket %v (%v), want %v", tc.headers, id, ok, tc.want)
		}
	}
}

// TestServe: a request gets its bucket's settings (here DENY_ALL before
// the first assignment); one without a bucket passes, uncounted.
func TestServe(t *testing.T) {
	m, err := envoysim.NewMatcher(filterConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, envoysim.Config{Matcher: m})
	if !h.env.Serve(map[string]string{":path": "/raw"}) {
		t.Error("a request without a bucket was denied")
	}
	if h.env.Serve(map[string]string{":path": "/raw", "x-tenant": "acme"}) {
		t.Error("no_assignment_behavior DENY_ALL of the bucket's settings let the first request pass")
	}
	if st := h.env.Stats(); st.Unbucketed != 1 || st.Subscriptions != 1 {
		t.Errorf("stats = %+v", st)
	}
	h.srv.next(t)
}

// TestKeepaliveBlackHole: through a black hole the stream stays open and
// silent; the ping after Interval and its jitter goes unanswered, and the
// stream is aborted Timeout later; while the way is cut, ticks cannot
// open another, and once it is back the next one does.
func TestKeepaliveBlackHole(t *testing.T) {
	h, sw := switchedHarness(t, envoysim.Config{Keepalive: envoysim.Keepalive{Interval: 12 * time.Second, Timeout: 3 * time.Second}})
	env := h.env
	h.respond(t, assignment(idA, time.Minute, blanket(typev3.RateLimitStrategy_ALLOW_ALL)))
	sw.BlackHole()
	h.advance(16 * time.Second) // the ping at 13.8s awaits its answer
	if st := env.Stats(); st.KeepaliveAborts != 0 || !env.Connected() {
		t.Fatalf("aborted before the timeout: %+v", st)
	}
	h.advance(900 * time.Millisecond)
	if st := env.Stats(); st.KeepaliveAborts != 1 || env.Connected() {
		t.Fatalf("not aborted 3s after the ping: %+v", st)
	}
	h.advance(5 * time.Second)
	if env.Connected() {
		t.Fatal("a stream opened through the black hole")
	}
	sw.Restore()
	h.advance(5 * time.Second)
	if !env.Connected() || env.Stats().StreamsOpened != 2 {
		t.Fatalf("no new stream once restored: %+v", env.Stats())
	}
}

// TestSwitchRefused: a refused way ends the open stream at once (Envoy
// sees the reset) and refuses new ones until restored.
func TestSwitchRefused(t *testing.T) {
	h, sw := switchedHarness(t, envoysim.Config{})
	env := h.env
	sw.Refuse()
	for env.Connected() {
		env.Await(5 * time.Second)
	}
	h.advance(5 * time.Second)
	if env.Connected() || env.Stats().DroppedReports != 1 {
		t.Fatalf("a stream opened through a refused way: %+v", env.Stats())
	}
	sw.Restore()
	h.advance(5 * time.Second)
	if !env.Connected() || env.Stats().StreamsOpened != 2 {
		t.Fatalf("no new stream once restored: %+v", env.Stats())
	}
}

// switchedHarness is a harness whose Envoy reaches the server through a
// Switch, its first bucket subscribed.
func switchedHarness(t *testing.T, cfg envoysim.Config) (*harness, *envoysim.Switch) {
	t.Helper()
	h := newHarness(t, envoysim.Config{})
	sw := envoysim.NewSwitch(h.dial)
	cfg.Domain = "d"
	env, err := envoysim.New(cfg, h.clock, sw.Dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	h.env = env
	env.Request(idA)
	h.srv.next(t)
	return h, sw
}

// TestMatcherTokenBucketDefault: bucket settings whose
// no_assignment_behavior is a token bucket crash Envoy; an Envoy of them
// is refused, saying so.
func TestMatcherTokenBucketDefault(t *testing.T) {
	s := `{"name": "s", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings",
		"reporting_interval": "5s", "bucket_id_builder": {"bucket_id_builder": {"name": {"string_value": "x"}}},
		"no_assignment_behavior": {"fallback_rate_limit": {"token_bucket": {"max_tokens": 5, "tokens_per_fill": 5, "fill_interval": "1s"}}}}}`
	var cfg rlqsv3.RateLimitQuotaFilterConfig
	if err := protojson.Unmarshal([]byte(`{"domain": "d", "bucket_matchers": {"on_no_match": {"action": `+s+`}}}`), &cfg); err != nil {
		t.Fatal(err)
	}
	m, err := envoysim.NewMatcher(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envoysim.New(envoysim.Config{Matcher: m}, envoysim.WallClock{}, nil); err == nil || !strings.Contains(err.Error(), "crashes") {
		t.Errorf("an Envoy of a token-bucket no_assignment_behavior: %v, want refused", err)
	}
}
