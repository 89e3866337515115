package refstats

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/internal/observe/statsmap"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// refHarness is a service whose decisions refStats counts, exported by a
// collector with the built-in mapping (or another).
type refHarness struct {
	t     *testing.T
	svc   *rls.Service
	stats *Stats
	reg   *prometheus.Registry // the reference's series only
	main  *prometheus.Registry
}

func newRefHarness(t *testing.T, ruleYAML string, nearRatio float64, mapper *statsmap.Mapper) *refHarness {
	t.Helper()
	r, err := rules.Parse(map[string][]byte{"rules.yaml": []byte(ruleYAML)})
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = st.Close() })
	l := limiter.New(st, limiter.Options{})
	l.SetRules(r.Set)
	h := &refHarness{t: t, reg: prometheus.NewRegistry(), main: prometheus.NewRegistry()}
	if h.stats, err = newStats(l, nearRatio, defaultMaxDynamicKeys, h.main); err != nil {
		t.Fatal(err)
	}
	if mapper == nil {
		mapper = statsmap.Default()
	}
	coll, err := newCollector(h.stats.store, mapper, h.main)
	if err != nil {
		t.Fatal(err)
	}
	h.reg.MustRegister(coll)
	h.stats.prom = coll
	h.svc = rls.New(l, rls.Options{Observer: h.stats, OnStoreError: limiter.FailError}, zaptest.NewLogger(t))
	return h
}

func desc(kv ...string) *common.RateLimitDescriptor {
	d := &common.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// call sends n requests of the descriptors to the domain.
func (h *refHarness) call(n int, domain string, ds ...*common.RateLimitDescriptor) {
	h.t.Helper()
	for range n {
		if _, err := h.svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds}); err != nil {
			h.t.Fatal(err)
		}
	}
}

// series returns every counter series of the reference's registry as
// "name{label=value,...}" -> value.
func (h *refHarness) series() map[string]float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "ratelimit_go_") {
			continue // the runtime's, checked by TestRuntimePoolCacheSeries
		}
		for _, m := range mf.GetMetric() {
			if m.Counter == nil {
				continue
			}
			out[seriesName(mf.GetName(), m.GetLabel())] = m.GetCounter().GetValue()
		}
	}
	return out
}

func seriesName(name string, ls []*dto.LabelPair) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

const rl = "ratelimit_service_rate_limit_"

// TestRefSeries drives decisions through the service and checks the
// series the reference's built-in mapping gives its stats, from the
// reference's semantics: a stat key is the rule's configured path, with
// request values for detailed_metric and value_to_metric; the mapping
// makes the first level key1, the second key2, and folds deeper ones.
func TestRefSeries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rules     string
		nearRatio float64
		drive     func(h *refHarness)
		want      map[string]float64
	}{{
		name:  "plain rule",
		rules: "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
		drive: func(h *refHarness) { h.call(3, "d", desc("k", "v")) },
		// near: floor(2*0.8) = 1 request; the second one takes the count
		// from 1 to 2, the third is over.
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=k_v}":   3,
			rl + "within_limit{domain=d,key1=k_v}": 2,
			rl + "near_limit{domain=d,key1=k_v}":   1,
			rl + "over_limit{domain=d,key1=k_v}":   1,
		},
	}, {
		name:      "near limit ratio",
		rules:     "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 4}\n",
		nearRatio: 0.5,
		drive:     func(h *refHarness) { h.call(4, "d", desc("k", "x")) },
		// floor(4*0.5) = 2: the third and fourth are near the limit.
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=k}":   4,
			rl + "within_limit{domain=d,key1=k}": 4,
			rl + "near_limit{domain=d,key1=k}":   2,
		},
	}, {
		name: "nested keys",
		rules: `domain: d
descriptors:
  - key: k1
    value: a
    descriptors:
      - key: k2
        rate_limit: {unit: minute, requests_per_unit: 10}
        descriptors:
          - key: k3
            value: c
            rate_limit: {unit: minute, requests_per_unit: 10}
`,
		drive: func(h *refHarness) {
			h.call(1, "d", desc("k1", "a", "k2", "b"))
			h.call(2, "d", desc("k1", "a", "k2", "b", "k3", "c"))
		},
		// The three-level rule folds into the two-level series.
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=k1_a,key2=k2}":   3,
			rl + "within_limit{domain=d,key1=k1_a,key2=k2}": 3,
		},
	}, {
		name:  "detailed_metric",
		rules: "domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		drive: func(h *refHarness) {
			h.call(2, "d", desc("user", "alice"))
			h.call(1, "d", desc("user", "bob"))
		},
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=user_alice}":   2,
			rl + "within_limit{domain=d,key1=user_alice}": 1,
			rl + "near_limit{domain=d,key1=user_alice}":   1, // floor(1*0.8) = 0
			rl + "over_limit{domain=d,key1=user_alice}":   1,
			rl + "total_hits{domain=d,key1=user_bob}":     1,
			rl + "within_limit{domain=d,key1=user_bob}":   1,
			rl + "near_limit{domain=d,key1=user_bob}":     1,
		},
	}, {
		name:  "detailed_metric with an address",
		rules: "domain: d\ndescriptors:\n  - key: remote_address\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
		drive: func(h *refHarness) { h.call(1, "d", desc("remote_address", "10.0.0.1")) },
		// The address's dots become '_', so it stays one level.
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=remote_address_10_0_0_1}":   1,
			rl + "within_limit{domain=d,key1=remote_address_10_0_0_1}": 1,
		},
	}, {
		name: "value_to_metric",
		rules: `domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: "api*"
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tier
    value: "gold*"
    rate_limit: {unit: minute, requests_per_unit: 100}
`,
		drive: func(h *refHarness) {
			h.call(1, "d", desc("route", "login", "method", "GET"))
			h.call(1, "d", desc("path", "api1"))
			h.call(1, "d", desc("tier", "gold2"))
		},
		// A value_to_metric level shows the request's value; a wildcard
		// level without it keeps its pattern.
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=route_login,key2=method}":   1,
			rl + "within_limit{domain=d,key1=route_login,key2=method}": 1,
			rl + "total_hits{domain=d,key1=path_api1}":                 1,
			rl + "within_limit{domain=d,key1=path_api1}":               1,
			rl + "total_hits{domain=d,key1=tier_gold*}":                1,
			rl + "within_limit{domain=d,key1=tier_gold*}":              1,
		},
	}, {
		name:  "shadow_mode",
		rules: "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		drive: func(h *refHarness) { h.call(3, "d", desc("k", "x")) },
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=k}":   3,
			rl + "within_limit{domain=d,key1=k}": 1,
			rl + "near_limit{domain=d,key1=k}":   1,
			rl + "over_limit{domain=d,key1=k}":   2,
			rl + "shadow_mode{domain=d,key1=k}":  2,
		},
	}, {
		name:  "limit override",
		rules: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
		drive: func(h *refHarness) {
			d := desc("k", "x", "sub", "y")
			d.Limit = &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 2}
			h.call(2, "d", d)
		},
		// An override's key is its entries.
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=k_x,key2=sub_y}":   2,
			rl + "within_limit{domain=d,key1=k_x,key2=sub_y}": 1,
			rl + "near_limit{domain=d,key1=k_x,key2=sub_y}":   1,
			rl + "over_limit{domain=d,key1=k_x,key2=sub_y}":   1,
		},
	}, {
		name:  "unknown domain",
		rules: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
		drive: func(h *refHarness) { h.call(2, "nope", desc("k", "x"), desc("k", "y")) },
		// Not in the built-in mapping: the escaped stat name.
		want: map[string]float64{"ratelimit_service_rate_limit_nope_domain_not_found{}": 4},
	}, {
		name:  "refunds",
		rules: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
		drive: func(h *refHarness) {
			h.call(3, "d", desc("k", "x"))
			refund := desc("k", "x")
			refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(2), true
			h.call(2, "d", refund)
		},
		// Hits given back count in total_negative_hits (envoyproxy/ratelimit#1140),
		// which the built-in mapping leaves as the escaped stat name, and
		// in no other stat.
		want: map[string]float64{
			rl + "total_hits{domain=d,key1=k}":                       3,
			rl + "within_limit{domain=d,key1=k}":                     3,
			"ratelimit_service_rate_limit_d_k_total_negative_hits{}": 4,
		},
	}, {
		name:  "unlimited and unmatched",
		rules: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n",
		drive: func(h *refHarness) { h.call(2, "d", desc("k", "x"), desc("other", "y")) },
		want:  map[string]float64{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ratio := tc.nearRatio
			if ratio == 0 {
				ratio = 0.8
			}
			h := newRefHarness(t, tc.rules, ratio, nil)
			tc.drive(h)
			got := h.series()
			if !maps.Equal(got, tc.want) {
				t.Errorf("series:\n%s\nwant:\n%s", dump(got), dump(tc.want))
			}
		})
	}
}

func dump(m map[string]float64) string {
	var lines []string
	for k, v := range m {
		lines = append(lines, "  "+k+" "+strconv.FormatFloat(v, 'g', -1, 64))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestRefHitsAddendCapped checks that one decision adds at most 2^32 to a
// stat, so that a hits_addend near 2^64 cannot wrap a counter.
func TestRefHitsAddendCapped(t *testing.T) {
	h := newRefHarness(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n", 0.8, nil)
	d := desc("k", "x")
	d.HitsAddend = wrapperspb.UInt64(1 << 63)
	h.call(3, "d", d)
	got := h.series()
	if v := got[rl+"total_hits{domain=d,key1=k}"]; v != 3*(1<<32) {
		t.Errorf("total_hits = %v, want 3 * 2^32", v)
	}
	if v := got[rl+"over_limit{domain=d,key1=k}"]; v != 3*(1<<32) {
		t.Errorf("over_limit = %v, want 3 * 2^32", v)
	}
}

// TestRefRefundsNotHits: a descriptor with is_negative_hits gives hits
// back; the reference has no stat for that, so it adds to none of the
// hit stats (the hits charged before it still count).
func TestRefRefundsNotHits(t *testing.T) {
	h := newRefHarness(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n", 0.8, nil)
	h.call(2, "d", desc("k", "x"))
	d := desc("k", "x")
	d.HitsAddend = wrapperspb.UInt64(5)
	d.IsNegativeHits = true
	h.call(1, "d", d)
	got := h.series()
	for stat, want := range map[string]float64{"total_hits": 2, "within_limit": 2, "over_limit": 0, "near_limit": 0} {
		if v := got[rl+stat+"{domain=d,key1=k}"]; v != want {
			t.Errorf("%s = %v, want %v", stat, v, want)
		}
	}
}

// TestRefServiceSeries checks the reference's service counters: config
// loads, failed calls, global shadow mode and the gRPC server's calls.
func TestRefServiceSeries(t *testing.T) {
	h := newRefHarness(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n", 0.8, nil)
	h.stats.Loaded(nil, true)
	h.stats.Loaded(nil, true)
	h.stats.LoadFailed()
	h.stats.Failed("", limiter.ErrUnavailable, time.Millisecond)
	h.stats.Failed("", errors.Join(limiter.ErrInvalid), time.Millisecond)
	h.stats.Failed("", limiter.ErrInvalid, time.Millisecond)
	h.stats.GlobalShadowed()
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	for range 3 {
		if _, err := h.stats.interceptor(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{
		"ratelimit_service_config_load_success{}":                           2,
		"ratelimit_service_config_load_error{}":                             1,
		"ratelimit_service_should_rate_limit_error{err_type=redis_error}":   1,
		"ratelimit_service_should_rate_limit_error{err_type=service_error}": 2,
		"ratelimit_service_global_shadow_mode{}":                            1,
		"ratelimit_service_total_requests{grpc_method=ShouldRateLimit}":     3,
	}
	if got := h.series(); !maps.Equal(got, want) {
		t.Errorf("series:\n%s\nwant:\n%s", dump(got), dump(want))
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_response_time_seconds" {
			continue
		}
		found = true
		m := mf.GetMetric()[0]
		if mf.GetType() != dto.MetricType_HISTOGRAM || m.GetHistogram().GetSampleCount() != 3 ||
			seriesName("", m.GetLabel()) != "{grpc_method=ShouldRateLimit}" {
			t.Errorf("response_time: %v", mf)
		}
	}
	if !found {
		t.Error("no ratelimit_service_response_time_seconds")
	}
}

// TestRefMetricNames lints the reference's series as promlint does. The
// reference's counters have no _total suffix, and its runtime and local
// cache stats keep gostats' camelCase (ratelimit_go_heapAlloc,
// ratelimit_localcache_entryCount); every other problem fails.
func TestRefMetricNames(t *testing.T) {
	h := newRefHarness(t, "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", 0.8, nil)
	h.call(3, "d", desc("k", "x"))
	h.call(1, "d", desc("k", "x", "j", "y"))
	h.stats.Loaded(nil, true)
	h.stats.LoadFailed()
	h.stats.Failed("", limiter.ErrUnavailable, 0)
	h.stats.GlobalShadowed()
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	_, _ = h.stats.interceptor(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil })
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{rl + "total_hits", rl + "over_limit", rl + "near_limit", rl + "within_limit", rl + "shadow_mode",
		"ratelimit_service_config_load_success", "ratelimit_service_config_load_error", "ratelimit_service_should_rate_limit_error",
		"ratelimit_service_global_shadow_mode", "ratelimit_service_total_requests", "ratelimit_service_response_time_seconds"} {
		if !names[n] {
			t.Errorf("family %s missing", n)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if (strings.HasPrefix(p.Metric, "ratelimit_service_") || strings.HasPrefix(p.Metric, "ratelimit_go_")) &&
			strings.Contains(p.Text, `"_total" suffix`) {
			continue // the reference's names, kept on purpose
		}
		if (strings.HasPrefix(p.Metric, "ratelimit_go_") || strings.HasPrefix(p.Metric, "ratelimit_localcache_")) &&
			strings.Contains(p.Text, "camelCase") {
			continue // gostats' names, as the reference exports them
		}
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestRefDynamicKeysCapped checks that past the cap, request values make
// no new series: decisions count under the rule's configured key.
func TestRefDynamicKeysCapped(t *testing.T) {
	h := newRefHarness(t, "domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n", 0.8, nil)
	h.stats.maxDynamic = 2
	for _, u := range []string{"a", "b", "c", "d", "a"} {
		h.call(1, "d", desc("user", u))
	}
	want := map[string]float64{
		rl + "total_hits{domain=d,key1=user_a}": 2, rl + "within_limit{domain=d,key1=user_a}": 2,
		rl + "total_hits{domain=d,key1=user_b}": 1, rl + "within_limit{domain=d,key1=user_b}": 1,
		rl + "total_hits{domain=d,key1=user}": 2, rl + "within_limit{domain=d,key1=user}": 2,
	}
	if got := h.series(); !maps.Equal(got, want) {
		t.Errorf("series:\n%s\nwant:\n%s", dump(got), dump(want))
	}
	if v := counterValue(t, h.main, "fastlimit_ref_stats_overflow_total"); v != 2 {
		t.Errorf("overflow = %v, want 2", v)
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestRefCustomMapper checks that a PROMETHEUS_MAPPER_YAML mapping
// decides names, labels and drops, and that a counter mapped onto a
// timer's name is skipped and counted.
func TestRefCustomMapper(t *testing.T) {
	m, _, err := statsmap.Parse([]byte(`mappings:
  - match: "ratelimit.service.rate_limit.*.*.*"
    name: "rl_${3}_total"
    labels: {dom: "$1", rule: "$2"}
  - match: "ratelimit.service.config_load_success"
    name: dropped
    action: drop
  - match: "ratelimit.service.global_shadow_mode"
    name: "rl_timer"
  - match: "ratelimit_server.*.response_time"
    name: "rl_timer"
`))
	if err != nil {
		t.Fatal(err)
	}
	h := newRefHarness(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", 0.8, m)
	h.call(2, "d", desc("k", "x"))
	h.stats.Loaded(nil, true)
	info := &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}
	_, _ = h.stats.interceptor(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil })
	h.stats.GlobalShadowed()
	want := map[string]float64{
		"rl_total_hits_total{dom=d,rule=k}":   2,
		"rl_within_limit_total{dom=d,rule=k}": 1,
		"rl_near_limit_total{dom=d,rule=k}":   1,
		"rl_over_limit_total{dom=d,rule=k}":   1,
		"ratelimit_server_C_total_requests{}": 1,
	}
	if got := h.series(); !maps.Equal(got, want) {
		t.Errorf("series:\n%s\nwant:\n%s", dump(got), dump(want))
	}
	if v := counterValue(t, h.main, "fastlimit_ref_stats_conflicts_total"); v != 1 {
		t.Errorf("conflicts = %v, want 1", v)
	}
}

// TestNewRefMetricsErrors checks that settings FastLimit cannot honour
// name their variable.
func TestNewRefMetricsErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	files.Write(t, bad, "mappings:\n  - match: a\n")
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"unparsable mapper", Options{UsePrometheus: true, PromPath: "/metrics", MapperYAML: bad}, "PROMETHEUS_MAPPER_YAML"},
		{"missing mapper", Options{UsePrometheus: true, PromPath: "/metrics", MapperYAML: filepath.Join(dir, "none")}, "PROMETHEUS_MAPPER_YAML"},
		{"path", Options{UsePrometheus: true, PromPath: "metrics"}, "PROMETHEUS_PATH"},
		{"both statsd", Options{UseStatsd: true, UseDogStatsd: true}, "USE_DOG_STATSD"},
		{"tags", Options{UseStatsd: true, StatsdHost: "localhost", StatsdPort: 8125, FlushInterval: time.Second, ExtraTags: "novalue"}, "EXTRA_TAGS"},
		{"interval", Options{UseStatsd: true, StatsdHost: "localhost", StatsdPort: 8125}, "STATS_FLUSH_INTERVAL"},
		{"protocol", Options{UseStatsd: true, StatsdHost: "localhost", StatsdPort: 8125, FlushInterval: time.Second, StatsdProtocol: "sctp"}, "STATSD_PROTOCOL"},
		{"mogrifier", Options{UseDogStatsd: true, StatsdHost: "localhost", StatsdPort: 8125, FlushInterval: time.Second, Mogrifiers: "X",
			Getenv: func(string) string { return "" }}, "DOG_STATSD_MOGRIFIER_X_PATTERN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limiter.New(store.NewMemory(store.MemoryOptions{}), limiter.Options{})
			_, err := New(tc.o, l, prometheus.NewRegistry(), zaptest.NewLogger(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestRefMetricsOff checks that without USE_PROMETHEUS, USE_STATSD and
// USE_DOG_STATSD (or with DISABLE_STATS) nothing is counted or served.
func TestRefMetricsOff(t *testing.T) {
	l := limiter.New(store.NewMemory(store.MemoryOptions{}), limiter.Options{})
	for _, o := range []Options{{}, {UsePrometheus: true, UseStatsd: true, DisableStats: true}} {
		m, err := New(o, l, prometheus.NewRegistry(), zaptest.NewLogger(t))
		if err != nil || m != nil {
			t.Fatalf("New(%+v) = %v, %v; want nil, nil", o, m, err)
		}
		if m.Stats() != nil || m.ServerOptions() != nil || m.Addr() != "" {
			t.Error("a nil Reporter counts, adds gRPC options or listens")
		}
	}
}

// TestStatKey checks stat keys of rules whose key depends on the request,
// share_threshold included, and the reference's sanitizing.
func TestStatKey(t *testing.T) {
	yaml := `domain: d
descriptors:
  - key: file
    value: "img*"
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: file
    value: "doc*"
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: ip
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
`
	r, err := rules.Parse(map[string][]byte{"r.yaml": []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	dom := r.Set.Domain("d")
	for _, tc := range []struct {
		entries []string
		want    string
	}{
		// share_threshold keeps the pattern, even with detailed_metric.
		{[]string{"file", "img1", "user", "bob"}, "d.file_img*.user_bob"},
		// ... and over value_to_metric.
		{[]string{"file", "doc7"}, "d.file_doc*"},
		// detailed_metric: every entry's key_value, IPv4 dots sanitized,
		// ':' and '|' too.
		{[]string{"tenant", "a:b|c", "ip", "10.1.2.3"}, "d.tenant_a_b_c.ip_10_1_2_3"},
		{[]string{"tenant", "v1.2.3.4567", "ip", "x"}, "d.tenant_v1_2_3_4567.ip_x"},
	} {
		d := desc(tc.entries...)
		lim := descriptors.Match(dom, d.GetEntries())
		if lim == nil {
			t.Fatalf("%v matches no rule", tc.entries)
		}
		if got := sanitizeStat(string(appendStatKey(nil, "d", lim, false, entriesOf(descView{d}, 0)))); got != tc.want {
			t.Errorf("%v: key %q, want %q", tc.entries, got, tc.want)
		}
	}
}

func TestMogrifiersFromEnv(t *testing.T) {
	env := map[string]string{
		"DOG_STATSD_MOGRIFIER_HITS_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
		"DOG_STATSD_MOGRIFIER_HITS_NAME":    "ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_HITS_TAGS":    "domain:$1,descriptor:$2",
	}
	ms, err := mogrifiers("HITS", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Name != "ratelimit.service.rate_limit.$3" || len(ms[0].Tags) != 2 ||
		!ms[0].Pattern.MatchString("ratelimit.service.rate_limit.d.k_v.over_limit") {
		t.Errorf("mogrifiers = %+v", ms)
	}
	env["DOG_STATSD_MOGRIFIER_HITS_TAGS"] = "domain:"
	if _, err := mogrifiers("HITS", func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "DOG_STATSD_MOGRIFIER_HITS_TAGS") {
		t.Errorf("empty tag value: err = %v", err)
	}
}

// descView shows Envoy descriptors as a limiter.View.
type descView []*common.RateLimitDescriptor

func (v descView) Len() int            { return len(v) }
func (v descView) Entries(i int) int   { return len(v[i].GetEntries()) }
func (v descView) Override(i int) bool { return v[i].GetLimit() != nil }
func (v descView) Entry(i, j int) (string, string) {
	e := v[i].GetEntries()[j]
	return e.GetKey(), e.GetValue()
}
