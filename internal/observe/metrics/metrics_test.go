package metrics

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{NearLimitRatio: 0.8, MaxDetailedMetricSeries: DefaultMaxDetailedSeries})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func window(path string, rpu uint32) *descriptors.Limit {
	return &descriptors.Limit{Path: path, Unit: descriptors.Minute, RequestsPerUnit: rpu, UnitMultiplier: 1,
		Cost: descriptors.Milli, Burst: int64(rpu) * descriptors.Milli}
}

// TestMetricNames lints every metric family the server registers, each
// made to appear at least once.
func TestMetricNames(t *testing.T) {
	m, reg := newTestMetrics(t)
	exercise(t, m)
	if err := RegisterBuildInfo(reg, "test"); err != nil {
		t.Fatal(err)
	}
	mfs := scrape.Linted(t, reg)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{
		"fastlimit_rule_total_hits_total", "fastlimit_rule_over_limit_total", "fastlimit_rule_near_limit_total",
		"fastlimit_rule_within_limit_total", "fastlimit_rule_shadow_mode_total", "fastlimit_rule_refunded_hits_total",
		"fastlimit_request_duration_seconds", "fastlimit_requests_total", "fastlimit_store_errors_total",
		"fastlimit_config_loads_total", "fastlimit_config_info", "fastlimit_config_last_reload_successful",
		"fastlimit_config_last_reload_success_timestamp_seconds", "fastlimit_config_limits",
		"fastlimit_unmatched_descriptors_total", "fastlimit_build_info",
		"go_goroutines", "process_cpu_seconds_total",
	} {
		if !names[want] {
			t.Errorf("metric %s is not gathered", want)
		}
	}
}

// exercise makes every series of m appear, but for the folded, removed
// and global shadow counters.
func exercise(t *testing.T, m *Metrics) {
	t.Helper()
	lim := window("d.k", 10)
	m.Decided("d", nil, &limiter.Response{Statuses: []limiter.Status{{Limit: lim, Hits: 1, Remaining: 1}}}, time.Millisecond)
	m.Decided("d", nil, &limiter.Response{Code: limiter.OverLimit, Statuses: []limiter.Status{{Code: limiter.OverLimit, Limit: lim, Hits: 1}}}, time.Millisecond)
	m.Decided("d", nil, &limiter.Response{Statuses: []limiter.Status{{Limit: lim, Hits: 1, Refund: true}}}, time.Millisecond)
	m.Decided("d", nil, &limiter.Response{Statuses: []limiter.Status{{Limit: lim, Hits: 1, Shadowed: true}}}, time.Millisecond)
	m.Failed("d", limiter.ErrUnavailable, time.Millisecond)
	m.Decided("d", nil, &limiter.Response{Statuses: []limiter.Status{{}}}, time.Millisecond)
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")})
	if err != nil {
		t.Fatal(err)
	}
	m.Loaded(rs, true)
	m.LoadFailed()
}

func TestRuleCounters(t *testing.T) {
	bucket := &descriptors.Limit{Path: "d.b", Algorithm: descriptors.TokenBucket, Unit: descriptors.Second,
		RequestsPerUnit: 1, UnitMultiplier: 1, Cost: descriptors.Milli, Burst: 50 * descriptors.Milli}
	free := &descriptors.Limit{Path: "d.free", Unlimited: true}
	cases := []struct {
		name                             string
		st                               limiter.Status
		path                             string
		total, over, near, within, shado float64
		refunded                         float64
	}{
		{"within", limiter.Status{Limit: window("d.w", 100), Hits: 3, Remaining: 50}, "d.w", 3, 0, 0, 3, 0, 0},
		// near: remaining <= (1-0.8)*100 = 20
		{"near at the threshold", limiter.Status{Limit: window("d.w", 100), Hits: 2, Remaining: 20}, "d.w", 2, 0, 2, 2, 0, 0},
		{"not near above it", limiter.Status{Limit: window("d.w", 100), Hits: 1, Remaining: 21}, "d.w", 1, 0, 0, 1, 0, 0},
		{"over", limiter.Status{Code: limiter.OverLimit, Limit: window("d.w", 100), Hits: 4}, "d.w", 4, 4, 0, 0, 0, 0},
		{"shadowed", limiter.Status{Limit: window("d.w", 100), Hits: 1, Shadowed: true}, "d.w", 1, 1, 0, 0, 1, 0},
		// buckets compare with their burst: (1-0.8)*50 = 10
		{"bucket near", limiter.Status{Limit: bucket, Hits: 1, Remaining: 10}, "d.b", 1, 0, 1, 1, 0, 0},
		{"bucket not near", limiter.Status{Limit: bucket, Hits: 1, Remaining: 11}, "d.b", 1, 0, 0, 1, 0, 0},
		{"unlimited", limiter.Status{Limit: free, Hits: 1, Remaining: 1<<32 - 1}, "d.free", 1, 0, 0, 1, 0, 0},
		{"peek counts nothing", limiter.Status{Limit: window("d.w", 100), Hits: 0, Remaining: 0}, "d.w", 0, 0, 0, 0, 0, 0},
		// a refund (is_negative_hits) is no hit, not even one near the limit
		{"refund counted apart", limiter.Status{Limit: window("d.w", 100), Hits: 4, Remaining: 5, Refund: true}, "d.w", 0, 0, 0, 0, 0, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMetrics(t)
			m.Decided("d", nil, &limiter.Response{Code: tc.st.Code, Statuses: []limiter.Status{tc.st}}, time.Millisecond)
			for _, c := range []struct {
				name string
				vec  *prometheus.CounterVec
				want float64
			}{
				{"total_hits", m.ruleHits, tc.total}, {"over_limit", m.ruleOver, tc.over}, {"near_limit", m.ruleNear, tc.near},
				{"within_limit", m.ruleWithin, tc.within}, {"shadow_mode", m.ruleShadow, tc.shado},
				{"refunded_hits", m.ruleRefunded, tc.refunded},
			} {
				if got := testutil.ToFloat64(c.vec.WithLabelValues("d", tc.path)); got != c.want {
					t.Errorf("%s = %v, want %v", c.name, got, c.want)
				}
			}
		})
	}
}

func TestNoRuleNoCount(t *testing.T) {
	m, _ := newTestMetrics(t)
	m.Decided("d", nil, &limiter.Response{Statuses: []limiter.Status{{}}}, time.Millisecond)
	if n := testutil.CollectAndCount(m.ruleHits); n != 0 {
		t.Fatalf("%d rule series for a descriptor no rule matched", n)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(codeOK)); got != 1 {
		t.Fatalf("requests{OK} = %v", got)
	}
}

func TestRequestCodes(t *testing.T) {
	m, _ := newTestMetrics(t)
	m.Decided("d", nil, &limiter.Response{}, time.Millisecond)
	m.Decided("d", nil, &limiter.Response{Code: limiter.OverLimit}, time.Millisecond)
	m.Decided("d", nil, &limiter.Response{Code: limiter.OverLimit}, time.Millisecond)
	m.Failed("d", fmt.Errorf("%w: no descriptors", limiter.ErrInvalid), time.Millisecond)
	m.Failed("d", fmt.Errorf("take: %w", limiter.ErrUnavailable), time.Millisecond)
	m.Failed("d", context.DeadlineExceeded, time.Millisecond)
	for code, want := range map[string]float64{codeOK: 1, codeOverLimit: 2, codeInvalid: 1, codeUnavailable: 2} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(code)); got != want {
			t.Errorf("requests{%s} = %v, want %v", code, got, want)
		}
	}
	if got := testutil.ToFloat64(m.storeErrors); got != 2 {
		t.Errorf("store errors = %v, want 2", got)
	}
	var h dto.Metric
	if err := m.duration.Write(&h); err != nil {
		t.Fatal(err)
	}
	if n := h.GetHistogram().GetSampleCount(); n != 6 {
		t.Fatalf("%d latency observations, want 6", n)
	}
}

func TestRuleLabel(t *testing.T) {
	es := func(kv ...string) []descriptors.Entry {
		var out []descriptors.Entry
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	plain := &descriptors.Limit{Path: "d.k_*"}
	detailed := &descriptors.Limit{Path: "d.k_*.sub", DetailedMetric: true}
	wildValue := &descriptors.Limit{Path: "d.a_x.k_v*", ValueToMetric: true}
	keyOnly := &descriptors.Limit{Path: "d.a_x.k", ValueToMetric: true}
	named := &descriptors.Limit{Path: "d.k_*", Name: "per_k"}
	namedDetailed := &descriptors.Limit{Path: "d.k_*.sub", Name: "per_sub", DetailedMetric: true}
	cases := []struct {
		lim  *descriptors.Limit
		es   []descriptors.Entry
		want string
	}{
		{plain, es("k", "abc"), "d.k_*"},
		// A rule's name labels it; one whose label takes request values
		// keeps its path.
		{named, es("k", "abc"), "per_k"},
		{named, nil, "per_k"},
		{namedDetailed, es("k", "abc", "sub", "1"), "d.k_abc.sub_1"},
		{namedDetailed, nil, "d.k_*.sub"},
		{detailed, es("k", "abc", "sub", "1"), "d.k_abc.sub_1"},
		{detailed, es("k", "abc", "sub", ""), "d.k_abc.sub"},
		{detailed, nil, "d.k_*.sub"},
		{wildValue, es("a", "x", "k", "v42"), "d.a_x.k_v42"},
		{keyOnly, es("a", "x", "k", "anything"), "d.a_x.k_anything"},
		// Request bytes that are not UTF-8 (Prometheus refuses such label
		// values) become U+FFFD.
		{detailed, es("k", "a\xffb", "sub", "\xc0"), "d.k_a\uFFFDb.sub_\uFFFD"},
		{keyOnly, es("a", "x", "k", "\xfe\xfe"), "d.a_x.k_\uFFFD"},
	}
	for _, tc := range cases {
		if got := ruleLabel(tc.lim, "d", view{tc.es}, 0); got != tc.want {
			t.Errorf("ruleLabel(%s, %v) = %q, want %q", tc.lim.Path, tc.es, got, tc.want)
		}
	}
}

func TestDecidedWithEntries(t *testing.T) {
	m, _ := newTestMetrics(t)
	lim := &descriptors.Limit{Path: "d.user", Unit: descriptors.Minute, RequestsPerUnit: 10, DetailedMetric: true}
	descs := view{{{Key: "user", Value: "alice"}}}
	m.Decided("d", descs, &limiter.Response{Statuses: []limiter.Status{{Limit: lim, Hits: 1, Remaining: 9}}}, time.Millisecond)
	if got := testutil.ToFloat64(m.ruleHits.WithLabelValues("d", "d.user_alice")); got != 1 {
		t.Fatalf("total_hits{rule=d.user_alice} = %v", got)
	}
}

func TestConfigMetrics(t *testing.T) {
	m, _ := newTestMetrics(t)
	parse := func(rpu int) *rules.Loaded {
		r, err := rules.Parse(map[string][]byte{"d.yaml": fmt.Appendf(nil, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", rpu)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1, r2 := parse(1), parse(2)
	m.Loaded(r1, true)
	m.LoadFailed()
	if got := testutil.ToFloat64(m.lastOK); got != 0 {
		t.Fatalf("last_reload_successful = %v after a failure", got)
	}
	m.Loaded(r2, true)
	m.Loaded(r2, false)
	for r, want := range map[string]float64{"success": 3, "failure": 1} {
		if got := testutil.ToFloat64(m.loads.WithLabelValues(r)); got != want {
			t.Errorf("loads{%s} = %v, want %v", r, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.info); n != 1 {
		t.Fatalf("%d config_info series, want the current one only", n)
	}
	if got := testutil.ToFloat64(m.info.WithLabelValues(r2.Hash)); got != 1 {
		t.Fatalf("config_info{hash=%s} = %v", r2.Hash, got)
	}
	if got := testutil.ToFloat64(m.lastOK); got != 1 {
		t.Fatalf("last_reload_successful = %v", got)
	}
	if ts := testutil.ToFloat64(m.lastOKTime); time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Fatalf("last success timestamp %v", ts)
	}
}

func TestNewMetricsTwiceOnOneRegistryFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Options{NearLimitRatio: 0.8}); err != nil {
		t.Fatal(err)
	}
	_, err := New(reg, Options{NearLimitRatio: 0.8})
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second registration: %v", err)
	}
}

// BenchmarkDecided counts one status of a limit that is not among the
// loaded rules, as for an override: its counters are found by label.
func BenchmarkDecided(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), Options{NearLimitRatio: 0.8})
	if err != nil {
		b.Fatal(err)
	}
	res := &limiter.Response{Statuses: []limiter.Status{{Limit: window("d.k_v", 100), Hits: 1, Remaining: 50}}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Decided("d", nil, res, time.Millisecond)
		}
	})
}

// BenchmarkDecidedLoaded is BenchmarkDecided for a limit of the rules in
// force, whose counters are resolved once rather than per decision.
func BenchmarkDecidedLoaded(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), Options{NearLimitRatio: 0.8})
	if err != nil {
		b.Fatal(err)
	}
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")})
	if err != nil {
		b.Fatal(err)
	}
	m.Loaded(rs, true)
	lim := descriptors.Match(rs.Set.Domain("d"), []descriptors.Entry{{Key: "k", Value: "v"}})
	res := &limiter.Response{Statuses: []limiter.Status{{Limit: lim, Hits: 1, Remaining: 50}}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Decided("d", nil, res, time.Millisecond)
		}
	})
}

// view is a request of plain descriptors, as Decided reads one.
type view [][]descriptors.Entry

func (v view) Len() int                        { return len(v) }
func (v view) Entries(i int) int               { return len(v[i]) }
func (v view) Override(int) bool               { return false }
func (v view) Entry(i, j int) (string, string) { return v[i][j].Key, v[i][j].Value }

// TestRuleCountersOfLoadedRules counts through the counters resolved for
// the rules in force: same series as WithLabelValues, each appearing only
// once it counts, request values for detailed_metric rules, and series
// that carry over a reload.
func TestRuleCountersOfLoadedRules(t *testing.T) {
	m, _ := newTestMetrics(t)
	load := func(rpu int) *descriptors.Domain {
		t.Helper()
		r, err := rules.Parse(map[string][]byte{"d.yaml": fmt.Appendf(nil, `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: %d}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`, rpu)})
		if err != nil {
			t.Fatal(err)
		}
		m.Loaded(r, true)
		return r.Set.Domain("d")
	}
	es := func(k, v string) []descriptors.Entry {
		return []descriptors.Entry{{Key: k, Value: v}}
	}
	decide := func(d *descriptors.Domain, entries []descriptors.Entry, st limiter.Status) {
		t.Helper()
		st.Limit = descriptors.Match(d, entries)
		if st.Limit == nil {
			t.Fatal("no rule matched")
		}
		m.Decided("d", view{entries}, &limiter.Response{Code: st.Code, Statuses: []limiter.Status{st}}, time.Millisecond)
	}
	count := func(vec *prometheus.CounterVec, rule string) float64 {
		t.Helper()
		return testutil.ToFloat64(vec.WithLabelValues("d", rule))
	}

	d := load(100)
	decide(d, es("k", "a"), limiter.Status{Hits: 2, Remaining: 50})
	if n := testutil.CollectAndCount(m.ruleOver) + testutil.CollectAndCount(m.ruleNear) + testutil.CollectAndCount(m.ruleShadow); n != 0 {
		t.Fatalf("%d over, near or shadow series before any such count", n)
	}
	decide(d, es("k", "b"), limiter.Status{Code: limiter.OverLimit, Hits: 1})
	decide(d, es("k", "c"), limiter.Status{Hits: 1, Shadowed: true})
	decide(d, es("k", "a"), limiter.Status{Hits: 1, Remaining: 10})
	decide(d, es("user", "alice"), limiter.Status{Hits: 1, Remaining: 9})

	d = load(200) // another set of limits; the series go on
	decide(d, es("k", "a"), limiter.Status{Hits: 1, Remaining: 150})
	for _, c := range []struct {
		name string
		vec  *prometheus.CounterVec
		rule string
		want float64
	}{
		{"total_hits", m.ruleHits, "d.k", 6}, {"over_limit", m.ruleOver, "d.k", 2}, {"shadow_mode", m.ruleShadow, "d.k", 1},
		{"within_limit", m.ruleWithin, "d.k", 4}, {"near_limit", m.ruleNear, "d.k", 1},
		{"total_hits detailed", m.ruleHits, "d.user_alice", 1},
	} {
		if got := count(c.vec, c.rule); got != c.want {
			t.Errorf("%s{rule=%s} = %v, want %v", c.name, c.rule, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.ruleHits); n != 2 {
		t.Errorf("%d total_hits series, want d.k and d.user_alice", n)
	}
}

// namedRules name two rules alike and leave one unnamed.
const namedRules = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5, name: per_key}
  - key: j
    rate_limit: {unit: hour, requests_per_unit: 9, name: per_key}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 9}
`

// TestRuleCountersNamed: loaded rules with a name count under it, two
// rules of one name in one series.
func TestRuleCountersNamed(t *testing.T) {
	m, _ := newTestMetrics(t)
	r, err := rules.Parse(map[string][]byte{"d.yaml": []byte(namedRules)})
	if err != nil {
		t.Fatal(err)
	}
	m.Loaded(r, true)
	for _, e := range []descriptors.Entry{{Key: "k", Value: "a"}, {Key: "j", Value: "b"}, {Key: "plain", Value: "c"}} {
		st := limiter.Status{Limit: descriptors.Match(r.Set.Domain("d"), []descriptors.Entry{e}), Hits: 1, Remaining: 1}
		m.Decided("d", view{{e}}, &limiter.Response{Statuses: []limiter.Status{st}}, time.Millisecond)
	}
	for rule, want := range map[string]float64{"per_key": 2, "d.plain": 1} {
		if got := testutil.ToFloat64(m.ruleHits.WithLabelValues("d", rule)); got != want {
			t.Errorf("total_hits{rule=%s} = %v, want %v", rule, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.ruleHits); n != 2 {
		t.Errorf("%d total_hits series, want per_key and d.plain", n)
	}
}

// TestRuleCountersConcurrentReload counts from several goroutines while
// the rules reload, for the race detector, and checks that no hit is lost.
func TestRuleCountersConcurrentReload(t *testing.T) {
	m, _ := newTestMetrics(t)
	var current atomic.Pointer[descriptors.Set]
	load := func() {
		r, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")})
		if err != nil {
			panic(err)
		}
		current.Store(r.Set) // as rules.load: the limiter first, then metrics
		m.Loaded(r, true)
	}
	load()
	const workers, decisions = 4, 500
	var wg sync.WaitGroup
	wg.Add(workers + 1)
	go func() {
		defer wg.Done()
		for range 50 {
			load()
		}
	}()
	for range workers {
		go func() {
			defer wg.Done()
			for range decisions {
				lim := descriptors.Match(current.Load().Domain("d"), []descriptors.Entry{{Key: "k", Value: "v"}})
				m.Decided("d", nil, &limiter.Response{Statuses: []limiter.Status{{Limit: lim, Hits: 1, Remaining: 50}}}, time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if got := testutil.ToFloat64(m.ruleHits.WithLabelValues("d", "d.k")); got != workers*decisions {
		t.Fatalf("total_hits = %v, want %d", got, workers*decisions)
	}
}

// TestDetailedSeriesBound: with a bound of 3, the first three request
// values of detailed_metric and value_to_metric rules get their own
// series; later ones count under the rule's path, and the folded counter
// says how many did. Rules labelled by their path alone are not bounded.
func TestDetailedSeriesBound(t *testing.T) {
	m, _ := newTestMetrics(t)
	m.detailed.max = 3
	r, err := rules.Parse(map[string][]byte{"d.yaml": []byte(`domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`)})
	if err != nil {
		t.Fatal(err)
	}
	m.Loaded(r, true)
	d := r.Set.Domain("d")
	decide := func(key, value string) {
		t.Helper()
		es := []descriptors.Entry{{Key: key, Value: value}}
		st := limiter.Status{Limit: descriptors.Match(d, es), Hits: 1, Remaining: 5}
		m.Decided("d", view{es}, &limiter.Response{Statuses: []limiter.Status{st}}, time.Millisecond)
	}
	steps := []struct {
		key, value string
		rule       string // the series that counts it
		folded     float64
	}{
		{"user", "a", "d.user_a", 0},
		{"user", "b", "d.user_b", 0},
		{"user", "a", "d.user_a", 0}, // held
		{"path", "x", "d.path_x", 0}, // the third series
		{"user", "c", "d.user", 1},   // folded
		{"path", "y", "d.path", 2},   // folded
		{"user", "b", "d.user_b", 2}, // held
		{"k", "z", "d.k", 2},         // labelled by its path: never folded
	}
	for i, s := range steps {
		before := testutil.ToFloat64(m.ruleHits.WithLabelValues("d", s.rule))
		decide(s.key, s.value)
		if got := testutil.ToFloat64(m.ruleHits.WithLabelValues("d", s.rule)); got != before+1 {
			t.Fatalf("step %d (%s=%s): %s did not count it", i, s.key, s.value, s.rule)
		}
		if got := testutil.ToFloat64(m.detailed.folded); got != s.folded {
			t.Fatalf("step %d: folded %v, want %v", i, got, s.folded)
		}
	}
	if n := testutil.CollectAndCount(m.ruleHits); n != 6 {
		t.Errorf("%d total_hits series, want 3 request-labelled, 2 paths of folded rules and d.k", n)
	}
}

// TestUnmatchedDescriptors counts descriptors no rule matched by domain:
// domains of the rules in force by name, any other as "other"; a
// replaced limit is not unmatched.
func TestUnmatchedDescriptors(t *testing.T) {
	m, _ := newTestMetrics(t)
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")})
	if err != nil {
		t.Fatal(err)
	}
	m.Loaded(rs, true)
	unmatched := limiter.Response{Statuses: []limiter.Status{{}, {Replaced: true}}}
	m.Decided("d", nil, &unmatched, time.Millisecond)
	for _, domain := range []string{"nope", "nope2", "d"} {
		m.Decided(domain, nil, &unmatched, time.Millisecond)
	}
	for label, want := range map[string]float64{"d": 2, otherDomain: 2} {
		if got := testutil.ToFloat64(m.unmatched.WithLabelValues(label)); got != want {
			t.Errorf("unmatched{domain=%q} = %v, want %v", label, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.unmatched); n != 2 {
		t.Errorf("%d unmatched series, want 2", n)
	}
}

// TestProcessMetrics exports the build.
func TestProcessMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterBuildInfo(reg, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`
# HELP fastlimit_build_info The running build: 1, labelled with its version and Go version.
# TYPE fastlimit_build_info gauge
fastlimit_build_info{goversion=%q,version="v1.2.3"} 1
`, runtime.Version())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fastlimit_build_info"); err != nil {
		t.Error(err)
	}
}
