package statsmap_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/observe/statsmap"
)

func labels(kv ...string) []statsmap.Label {
	var out []statsmap.Label
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, statsmap.Label{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// TestDefault checks the built-in mapping against the series that
// envoyproxy/ratelimit's built-in mapping produces for its stat names.
func TestDefault(t *testing.T) {
	m := statsmap.Default()
	for _, tc := range []struct {
		stat   string
		typ    statsmap.Type
		name   string
		labels []statsmap.Label
		mapped bool
	}{
		{"ratelimit.service.rate_limit.d.key1_val1.over_limit", statsmap.Counter,
			"ratelimit_service_rate_limit_over_limit", labels("domain", "d", "key1", "key1_val1"), true},
		{"ratelimit.service.rate_limit.d.k.total_hits", statsmap.Counter,
			"ratelimit_service_rate_limit_total_hits", labels("domain", "d", "key1", "k"), true},
		{"ratelimit.service.rate_limit.d.k.near_limit", statsmap.Counter,
			"ratelimit_service_rate_limit_near_limit", labels("domain", "d", "key1", "k"), true},
		{"ratelimit.service.rate_limit.d.k.within_limit", statsmap.Counter,
			"ratelimit_service_rate_limit_within_limit", labels("domain", "d", "key1", "k"), true},
		{"ratelimit.service.rate_limit.d.k.shadow_mode", statsmap.Counter,
			"ratelimit_service_rate_limit_shadow_mode", labels("domain", "d", "key1", "k"), true},
		// Nested keys: the second level is key2, deeper ones fold into it.
		{"ratelimit.service.rate_limit.d.key1_val1.key2_val2.over_limit", statsmap.Counter,
			"ratelimit_service_rate_limit_over_limit", labels("domain", "d", "key1", "key1_val1", "key2", "key2_val2"), true},
		{"ratelimit.service.rate_limit.d.a_1.b_2.c_3.within_limit", statsmap.Counter,
			"ratelimit_service_rate_limit_within_limit", labels("domain", "d", "key1", "a_1", "key2", "b_2"), true},
		// Unanchored regexes, in order: near_limit is tried first.
		{"ratelimit.service.rate_limit.d.a.b.near_limit_x.total_hits", statsmap.Counter,
			"ratelimit_service_rate_limit_near_limit", labels("domain", "d", "key1", "a", "key2", "b"), true},
		{"ratelimit.service.rate_limit.d.a.b.over_limit_with_local_cache", statsmap.Counter,
			"ratelimit_service_rate_limit_over_limit", labels("domain", "d", "key1", "a", "key2", "b"), true},
		// Two levels of over_limit_with_local_cache match nothing.
		{"ratelimit.service.rate_limit.d.a.over_limit_with_local_cache", statsmap.Counter,
			"ratelimit_service_rate_limit_d_a_over_limit_with_local_cache", nil, false},
		{"ratelimit.service.call.should_rate_limit.redis_error", statsmap.Counter,
			"ratelimit_service_should_rate_limit_error", labels("err_type", "redis_error"), true},
		{"ratelimit.service.config_load_success", statsmap.Counter, "ratelimit_service_config_load_success", nil, true},
		{"ratelimit.service.config_load_error", statsmap.Counter, "ratelimit_service_config_load_error", nil, true},
		// match_metric_type counter: a gauge of that name is not mapped.
		{"ratelimit.service.config_load_error", statsmap.Gauge, "ratelimit_service_config_load_error", nil, false},
		{"ratelimit.service.global_shadow_mode", statsmap.Counter, "ratelimit_service_global_shadow_mode", nil, false},
		{"ratelimit.service.rate_limit.d.domain_not_found", statsmap.Counter,
			"ratelimit_service_rate_limit_d_domain_not_found", nil, false},
		{"ratelimit_server.ShouldRateLimit.total_requests", statsmap.Counter,
			"ratelimit_service_total_requests", labels("grpc_method", "ShouldRateLimit"), true},
		{"ratelimit_server.ShouldRateLimit.response_time", statsmap.Observer,
			"ratelimit_service_response_time_seconds", labels("grpc_method", "ShouldRateLimit"), true},
	} {
		r := m.Map(tc.stat, tc.typ)
		if r.Name != tc.name || !reflect.DeepEqual(r.Labels, tc.labels) || r.Mapped != tc.mapped || r.Drop {
			t.Errorf("Map(%q) = %s %v mapped=%v drop=%v, want %s %v mapped=%v",
				tc.stat, r.Name, r.Labels, r.Mapped, r.Drop, tc.name, tc.labels, tc.mapped)
		}
	}
	rt := m.Map("ratelimit_server.ShouldRateLimit.response_time", statsmap.Observer)
	if rt.Observer != statsmap.Histogram || !reflect.DeepEqual(rt.Buckets, statsmap.DefBuckets) {
		t.Errorf("response_time: observer %v buckets %v, want a histogram with the default buckets", rt.Observer, rt.Buckets)
	}
	if u := m.Map("some.timer", statsmap.Observer); u.Observer != statsmap.Summary || len(u.Objectives) != 3 {
		t.Errorf("unmapped timer: observer %v objectives %v, want a summary with 3 quantiles", u.Observer, u.Objectives)
	}
}

func TestParse(t *testing.T) {
	const file = `
defaults:
  match_type: glob
  observer_type: histogram
  buckets: [1, 5, 10]
  ttl: 1m
mappings:
  - match: "a.*.b"
    name: "first_$1"
    labels: {lx: "${1}", ly: "$2", lz: lit}
  - match: "a.*.*"
    name: second
    labels: {pp: "$1-$2"}
  - match: "drop.*"
    name: dropped
    action: drop
  - match: 'rx\.(\w+)\.(\w+)'
    match_type: regex
    name: "rx_$2"
    help: "Regex mapped."
    labels: {first: "$1"}
    observer_type: summary
    quantiles: [{quantile: 0.5, error: 0.1}]
    scale: 0.001
  - match: "t.*"
    name: timer_only
    match_metric_type: timer
    frobnicate: true
`
	m, warns, err := statsmap.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	wantWarns := []string{"defaults: ttl is not honoured", "mapping 5 (line 25): unknown field frobnicate"}
	if len(warns) != len(wantWarns) {
		t.Fatalf("warnings %q, want %d", warns, len(wantWarns))
	}
	for i, w := range wantWarns {
		if !strings.Contains(warns[i], w) {
			t.Errorf("warning %d = %q, want it to contain %q", i, warns[i], w)
		}
	}
	for _, tc := range []struct {
		stat   string
		typ    statsmap.Type
		name   string
		labels []statsmap.Label
		drop   bool
	}{
		// File order decides between globs that both match.
		{"a.q.b", statsmap.Counter, "first_q", labels("lx", "q", "ly", "", "lz", "lit"), false},
		{"a.q.c", statsmap.Counter, "second", labels("pp", "q-c"), false},
		{"a..c", statsmap.Counter, "second", labels("pp", "-c"), false},
		{"drop.me", statsmap.Counter, "dropped", nil, true},
		{"rx.one.two", statsmap.Counter, "rx_two", labels("first", "one"), false},
		{"xx.rx.one.two.yy", statsmap.Counter, "rx_two", labels("first", "one"), false},
		{"t.x", statsmap.Counter, "t_x", nil, false},
		{"t.x", statsmap.Observer, "timer_only", nil, false},
		{"a.b", statsmap.Counter, "a_b", nil, false},
		{"9lives.x-y--z", statsmap.Counter, "_9lives_x_y_z", nil, false},
	} {
		r := m.Map(tc.stat, tc.typ)
		if r.Name != tc.name || !reflect.DeepEqual(r.Labels, tc.labels) || r.Drop != tc.drop {
			t.Errorf("Map(%q) = %s %v drop=%v, want %s %v drop=%v", tc.stat, r.Name, r.Labels, r.Drop, tc.name, tc.labels, tc.drop)
		}
	}
	rx := m.Map("rx.a.b", statsmap.Observer)
	if rx.Observer != statsmap.Summary || rx.Scale != 0.001 || rx.Help != "Regex mapped." ||
		!reflect.DeepEqual(rx.Objectives, []statsmap.Objective{{Quantile: 0.5, Error: 0.1}}) {
		t.Errorf("rx observer: %+v", rx)
	}
	if g := m.Map("a.q.b", statsmap.Observer); !reflect.DeepEqual(g.Buckets, []float64{1, 5, 10}) || g.Observer != statsmap.Histogram {
		t.Errorf("default buckets not applied: %+v", g)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       error
		text       string
	}{
		{"not yaml", "mappings: [", statsmap.ErrSyntax, ""},
		{"mappings not a list", "mappings: 3", statsmap.ErrSyntax, ""},
		{"no name", "mappings:\n  - match: a.b\n", statsmap.ErrMapping, "mapping 1 (line 2): no metric name"},
		{"bad name", "mappings:\n  - {match: a.b, name: 'a.b'}\n", statsmap.ErrMapping, "not a Prometheus name"},
		{"bad glob", "mappings:\n  - {match: 'a.b*', name: x}\n", statsmap.ErrMapping, "invalid glob match"},
		{"bad regex", "mappings:\n  - {match: 'a(', match_type: regex, name: x}\n", statsmap.ErrMapping, "invalid regex"},
		{"bad label", "mappings:\n  - {match: a, name: x, labels: {a: b}}\n", statsmap.ErrMapping, "invalid label name"},
		{"bad action", "mappings:\n  - {match: a, name: x, action: keep}\n", statsmap.ErrMapping, "neither map nor drop"},
		{"bad type", "mappings:\n  - {match: a, name: x, match_metric_type: set}\n", statsmap.ErrMapping, "match_metric_type"},
		{"bad observer", "mappings:\n  - {match: a, name: x, observer_type: dist}\n", statsmap.ErrMapping, "observer type"},
		{"bad match type", "mappings:\n  - {match: a, name: x, match_type: exact}\n", statsmap.ErrMapping, "match_type"},
		{"unsorted buckets", "mappings:\n  - {match: a, name: x, observer_type: histogram, buckets: [2, 1]}\n", statsmap.ErrMapping, "increasing"},
		{"summary with buckets", "mappings:\n  - {match: a, name: x, observer_type: summary, histogram_options: {buckets: [1]}}\n", statsmap.ErrMapping, "summary"},
		{"second mapping", "mappings:\n  - {match: a, name: x}\n  - {match: b, name: ''}\n", statsmap.ErrMapping, "mapping 2 (line 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := statsmap.Parse([]byte(tc.file))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("err = %q, want it to contain %q", err, tc.text)
			}
		})
	}
}

func TestDefaultYAMLParsesWithoutWarnings(t *testing.T) {
	_, warns, err := statsmap.Parse(statsmap.DefaultYAML())
	if err != nil || len(warns) > 0 {
		t.Fatalf("default mapping: err %v, warnings %q", err, warns)
	}
}

// FuzzParse checks that Parse never panics and that a mapper it returns
// maps any name to a valid Prometheus name.
func FuzzParse(f *testing.F) {
	f.Add(string(statsmap.DefaultYAML()), "ratelimit.service.rate_limit.d.k.over_limit")
	f.Add("mappings:\n  - {match: 'a.*', name: 'x_$1', labels: {ab: '$1'}}\n", "a.b")
	f.Add("mappings:\n  - {match: '(.*)', match_type: regex, name: '$1', labels: {ab: '${1}'}}\n", "9.-x")
	f.Add("defaults: {match_type: regex}\nmappings:\n  - {match: '', name: x}\n", "")
	f.Fuzz(func(t *testing.T, file, stat string) {
		m, _, err := statsmap.Parse([]byte(file))
		if err != nil {
			return
		}
		for _, typ := range []statsmap.Type{statsmap.Counter, statsmap.Gauge, statsmap.Observer} {
			r := m.Map(stat, typ)
			if !validName(r.Name) && r.Name != "" {
				t.Fatalf("Map(%q) = invalid name %q", stat, r.Name)
			}
		}
	})
}

func validName(s string) bool {
	for i, c := range s {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

// TestDefaultSeconds: upstream's built-in mapping (since #1104) scales the
// response timer's milliseconds to seconds; Default, the pinned one's,
// keeps them; nothing else changes.
func TestDefaultSeconds(t *testing.T) {
	const timer = "ratelimit_server.ShouldRateLimit.response_time"
	ms, s := statsmap.Default().Map(timer, statsmap.Observer), statsmap.DefaultSeconds().Map(timer, statsmap.Observer)
	if ms.Scale != 1 || s.Scale != 0.001 || s.Name != "ratelimit_service_response_time_seconds" || s.Name != ms.Name {
		t.Errorf("Default scale %v (%s), DefaultSeconds scale %v (%s)", ms.Scale, ms.Name, s.Scale, s.Name)
	}
	for _, stat := range []string{"ratelimit.service.rate_limit.d.k.total_hits", "ratelimit_server.ShouldRateLimit.total_requests"} {
		a, b := statsmap.Default().Map(stat, statsmap.Counter), statsmap.DefaultSeconds().Map(stat, statsmap.Counter)
		if a.Name != b.Name || a.Scale != b.Scale {
			t.Errorf("%s: %+v vs %+v", stat, a, b)
		}
	}
}
