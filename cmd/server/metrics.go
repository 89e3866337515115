package main

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	config "github.com/fastlimit/fastlimit/pkg/rules"
)

// Result codes of fastlimit_requests_total.
const (
	codeOK          = "OK"
	codeOverLimit   = "OVER_LIMIT"
	codeInvalid     = "INVALID_ARGUMENT"
	codeUnavailable = "UNAVAILABLE"
	codeUnknown     = "UNKNOWN" // no rules yet (xDS, forced start)
)

// metrics are the server's Prometheus metrics. As an observer it counts
// every decision; the rules loader reports loads to it. Its methods are
// safe for concurrent use and do not block.
type metrics struct {
	farShare int64 // 1-nearRatio, in millionths

	ruleHits, ruleOver, ruleNear, ruleWithin, ruleShadow *prometheus.CounterVec
	// series holds the rule counters of the rules in force, by limit,
	// rebuilt on each load that changes them. A limit not in it (an
	// override, one of older rules, detailed_metric and value_to_metric
	// rules, whose label takes the request's values) counts through the
	// vecs.
	series atomic.Pointer[map[*descriptors.Limit]*ruleSeries]
	// detailed bounds the series whose rule label takes request values.
	detailed detailedSeries

	// unmatched counts descriptors no rule matched, by domain: the
	// domains of the rules in force, every other one as "other", so
	// that requests cannot grow the series without bound.
	unmatched       *prometheus.CounterVec
	unmatchedByName atomic.Pointer[map[string]prometheus.Counter]
	unmatchedOther  prometheus.Counter

	duration    prometheus.Histogram
	requests    *prometheus.CounterVec
	ok, over    prometheus.Counter // requests by code, resolved once
	byCode      map[string]prometheus.Counter
	storeErrors prometheus.Counter
	// globalShadow counts OVER_LIMIT answers that --shadow-mode turned OK.
	globalShadow prometheus.Counter

	// onLoad, if set, is told of every load of the rules, as loaded and
	// loadFailed are.
	onLoad func(ok bool)

	loads      *prometheus.CounterVec
	info       *prometheus.GaugeVec
	lastOK     prometheus.Gauge
	lastOKTime prometheus.Gauge
	limits     prometheus.Gauge
}

var _ observer = (*metrics)(nil)

// newMetrics registers the server's metrics, and the Go runtime and
// process collectors, on reg. nearRatio is the share of a limit used past
// which hits count as near the limit.
func newMetrics(reg prometheus.Registerer, nearRatio float64) (*metrics, error) {
	rule := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fastlimit", Subsystem: "rule", Name: name, Help: help,
		}, []string{"domain", "rule"})
	}
	m := &metrics{
		farShare:   int64(math.Round((1 - nearRatio) * 1e6)),
		ruleHits:   rule("total_hits_total", "Hits charged against the rule, in requests."),
		ruleOver:   rule("over_limit_total", "Hits over the rule's limit, shadowed ones included."),
		ruleNear:   rule("near_limit_total", "Hits allowed with the rule's remaining at or below the near-limit share."),
		ruleWithin: rule("within_limit_total", "Hits allowed by the rule."),
		ruleShadow: rule("shadow_mode_total", "Hits over the rule's limit that shadow mode let through."),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fastlimit", Name: "request_duration_seconds",
			Help:    "Time to decide a rate-limit request, store round trip included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fastlimit", Name: "requests_total",
			Help: "Rate-limit requests by result: OK, OVER_LIMIT, INVALID_ARGUMENT, UNAVAILABLE, or UNKNOWN before the first rules from xDS.",
		}, []string{"code"}),
		unmatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fastlimit", Name: "unmatched_descriptors_total",
			Help: "Descriptors that no rule matched (so nothing limited them), by domain; domains without rules count as \"other\".",
		}, []string{"domain"}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fastlimit", Name: "global_shadow_mode_total",
			Help: "Requests over limit that global shadow mode (--shadow-mode) answered OK.",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fastlimit", Name: "store_errors_total",
			Help: "Requests that failed because the store did not answer, or answered with an error.",
		}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fastlimit", Subsystem: "config", Name: "loads_total",
			Help: "Loads of the rules directory (or xDS snapshots) by result: success or failure. A failed reload keeps the rules in force.",
		}, []string{"result"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fastlimit", Subsystem: "config", Name: "info",
			Help: "The rules in force: 1, labelled with their hash (SHA-256 of the files' or xDS resources' names and contents).",
		}, []string{"hash"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fastlimit", Subsystem: "config", Name: "last_reload_successful",
			Help: "1 if the last load of the rules directory (or xDS snapshot) succeeded, 0 if it failed and older rules are in force.",
		}),
		lastOKTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fastlimit", Subsystem: "config", Name: "last_reload_success_timestamp_seconds",
			Help: "When the rules directory (or an xDS snapshot) last loaded successfully, in Unix seconds.",
		}),
		limits: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fastlimit", Subsystem: "config", Name: "limits",
			Help: "Limits in the rules in force.",
		}),
	}
	m.detailed.max = defaultMaxDetailedSeries
	m.detailed.folded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fastlimit", Subsystem: "rule", Name: "detailed_series_folded_total",
		Help: "Decisions of detailed_metric and value_to_metric rules counted under the rule's path, because --max-detailed-metric-series request-labelled series existed.",
	})
	m.byCode = map[string]prometheus.Counter{}
	for _, c := range []string{codeOK, codeOverLimit, codeInvalid, codeUnavailable, codeUnknown} {
		m.byCode[c] = m.requests.WithLabelValues(c)
	}
	m.ok, m.over = m.byCode[codeOK], m.byCode[codeOverLimit]
	m.unmatchedOther = m.unmatched.WithLabelValues(otherDomain)
	for _, r := range []string{"success", "failure"} {
		m.loads.WithLabelValues(r)
	}
	cs := []prometheus.Collector{
		m.ruleHits, m.ruleOver, m.ruleNear, m.ruleWithin, m.ruleShadow,
		m.duration, m.requests, m.storeErrors, m.globalShadow, m.unmatched,
		m.loads, m.info, m.lastOK, m.lastOKTime, m.limits, m.detailed.folded,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// Decided counts a decision; the request's entries give the values that
// detailed_metric and value_to_metric rules put in their rule label.
func (m *metrics) Decided(req *rls.RateLimitRequest, res *limiter.Response, took time.Duration) {
	m.decided(req.GetDomain(), req.GetDescriptors(), res, took)
}

// GlobalShadowed counts an OVER_LIMIT answer that global shadow mode
// turned OK.
func (m *metrics) GlobalShadowed() { m.globalShadow.Inc() }

// decided counts a decision. descs, when not nil, are the request's
// descriptors, one per status, and give the values that detailed_metric
// and value_to_metric rules put in their rule label.
func (m *metrics) decided(domain string, descs []*common.RateLimitDescriptor, res *limiter.Response, took time.Duration) {
	m.duration.Observe(took.Seconds())
	if res.Code == limiter.OverLimit {
		m.over.Inc()
	} else {
		m.ok.Inc()
	}
	var series map[*descriptors.Limit]*ruleSeries
	if p := m.series.Load(); p != nil {
		series = *p
	}
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if st.Limit == nil && !st.Replaced {
			m.unmatchedIn(domain).Inc()
		}
		if st.Limit == nil || st.Hits == 0 {
			continue
		}
		if rs := series[st.Limit]; rs != nil {
			m.ruleCached(rs, domain, st)
			continue
		}
		var es []entry
		if i < len(descs) {
			es = descs[i].GetEntries()
		}
		rule := ruleLabel(st.Limit, domain, es)
		if rule != st.Limit.Path {
			rule = m.detailed.label(domain, rule, st.Limit.Path)
		}
		m.rule(domain, rule, st)
	}
}

// maxCountedHits caps the hits one descriptor's decision adds to the rule
// counters. A descriptor's hits_addend may be anything up to 2^64-1; such
// a request is decided (OVER_LIMIT: the charge saturates) but counts as
// 2^32 hits, so that a few of them cannot push a counter past what a
// float64 holds exactly, or past 2^64 in exporters that convert to
// integers, where it would read as a counter reset. A request's own
// hits_addend is a uint32 and is never capped.
const maxCountedHits = 1 << 32

// countedHits is what st adds to its rule's counters.
func countedHits(st *limiter.Status) float64 { return float64(min(st.Hits, maxCountedHits)) }

func (m *metrics) rule(domain, rule string, st *limiter.Status) {
	hits := countedHits(st)
	m.ruleHits.WithLabelValues(domain, rule).Add(hits)
	switch {
	case st.Shadowed:
		m.ruleOver.WithLabelValues(domain, rule).Add(hits)
		m.ruleShadow.WithLabelValues(domain, rule).Add(hits)
	case st.Code == limiter.OverLimit:
		m.ruleOver.WithLabelValues(domain, rule).Add(hits)
	default:
		m.ruleWithin.WithLabelValues(domain, rule).Add(hits)
		if m.near(st) {
			m.ruleNear.WithLabelValues(domain, rule).Add(hits)
		}
	}
}

// ruleCached counts as rule does, through the rule's resolved counters.
func (m *metrics) ruleCached(rs *ruleSeries, domain string, st *limiter.Status) {
	hits := countedHits(st)
	rs.hits.get(m.ruleHits, domain, rs.rule).Add(hits)
	switch {
	case st.Shadowed:
		rs.over.get(m.ruleOver, domain, rs.rule).Add(hits)
		rs.shadow.get(m.ruleShadow, domain, rs.rule).Add(hits)
	case st.Code == limiter.OverLimit:
		rs.over.get(m.ruleOver, domain, rs.rule).Add(hits)
	default:
		rs.within.get(m.ruleWithin, domain, rs.rule).Add(hits)
		if m.near(st) {
			rs.near.get(m.ruleNear, domain, rs.rule).Add(hits)
		}
	}
}

// ruleSeries are the counters of one configured limit whose rule label
// is its path. Each is resolved on its first count, so that a series
// appears only once it counts, as with WithLabelValues.
type ruleSeries struct {
	rule                             string
	hits, over, near, within, shadow lazyCounter
}

// lazyCounter is one series of a CounterVec, resolved on first use and
// kept with the domain it was resolved for.
type lazyCounter struct{ p atomic.Pointer[domainCounter] }

type domainCounter struct {
	domain string
	c      prometheus.Counter
}

// get returns the (domain, rule) series of vec. Racing first calls
// resolve the same series.
func (lc *lazyCounter) get(vec *prometheus.CounterVec, domain, rule string) prometheus.Counter {
	if dc := lc.p.Load(); dc != nil && dc.domain == domain {
		return dc.c
	}
	c := vec.WithLabelValues(domain, rule)
	lc.p.Store(&domainCounter{domain: domain, c: c})
	return c
}

// cacheSeries indexes the counters of set's limits whose rule label does
// not depend on the request (neither detailed_metric nor value_to_metric).
// Series already counted keep their values; those of removed rules stay,
// as they always have.
func (m *metrics) cacheSeries(set *descriptors.Set) {
	byName := map[string]prometheus.Counter{}
	for _, d := range set.Domains() {
		byName[d] = m.unmatched.WithLabelValues(d)
	}
	m.unmatchedByName.Store(&byName)

	lims := set.Limits()
	all := make([]ruleSeries, len(lims))
	series := make(map[*descriptors.Limit]*ruleSeries, len(lims))
	for i, l := range lims {
		if l.DetailedMetric || l.ValueToMetric {
			continue
		}
		all[i].rule = l.Path
		series[l] = &all[i]
	}
	m.series.Store(&series)
}

// otherDomain labels unmatched descriptors of domains without rules.
const otherDomain = "other"

// unmatchedIn returns the unmatched counter of domain.
func (m *metrics) unmatchedIn(domain string) prometheus.Counter {
	if p := m.unmatchedByName.Load(); p != nil {
		if c, ok := (*p)[domain]; ok {
			return c
		}
	}
	return m.unmatchedOther
}

// near reports whether an allowed status has at most (1-nearRatio) of its
// limit left: of requests_per_unit for windows, of burst for buckets. The
// share is rounded to millionths, so that 0.8 of 100 is exactly 80.
func (m *metrics) near(st *limiter.Status) bool {
	lim := st.Limit
	if lim.Unlimited {
		return false
	}
	capacity := lim.Capacity()
	if lim.Algorithm == descriptors.TokenBucket {
		capacity = lim.Burst
	}
	return float64(st.Remaining)*descriptors.Milli*1e6 <= float64(m.farShare)*float64(capacity)
}

// Failed counts a request that failed: invalid, or a store failure.
func (m *metrics) Failed(_ *rls.RateLimitRequest, err error, took time.Duration) {
	m.duration.Observe(took.Seconds())
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		m.byCode[codeInvalid].Inc()
		return
	case errors.Is(err, errNoRules):
		m.byCode[codeUnknown].Inc()
		return
	}
	m.byCode[codeUnavailable].Inc()
	m.storeErrors.Inc()
}

// loaded records a successful load of rules, changed or not.
func (m *metrics) loaded(r *config.Loaded, changed bool) {
	m.loads.WithLabelValues("success").Inc()
	if m.onLoad != nil {
		m.onLoad(true)
	}
	m.lastOK.Set(1)
	m.lastOKTime.SetToCurrentTime()
	if changed {
		m.info.Reset()
		m.info.WithLabelValues(r.Hash).Set(1)
		m.limits.Set(float64(len(r.Set.Limits())))
		m.cacheSeries(r.Set)
	}
}

// loadFailed records a failed load; the rules in force stay.
func (m *metrics) loadFailed() {
	m.loads.WithLabelValues("failure").Inc()
	if m.onLoad != nil {
		m.onLoad(false)
	}
	m.lastOK.Set(0)
}

// ruleLabel is the rule label of a status's limit: the limit's path, with
// request values for rules that ask for them, as envoyproxy/ratelimit
// names their stats. detailed_metric puts every entry of the request in
// ("domain.key_value.key2_value2"); value_to_metric replaces the matched
// level's configured value (a wildcard, or none) with the request's.
// Without entries it is the path.
func ruleLabel(lim *descriptors.Limit, domain string, es []entry) string {
	if len(es) == 0 || !(lim.DetailedMetric || lim.ValueToMetric) {
		return lim.Path
	}
	var b strings.Builder
	if lim.DetailedMetric {
		b.WriteString(domain)
		for _, e := range es {
			writeLevel(&b, e.GetKey(), e.GetValue())
		}
		return b.String()
	}
	last := es[len(es)-1]
	b.WriteString(parentPath(lim.Path, last.GetKey()))
	writeLevel(&b, last.GetKey(), last.GetValue())
	return b.String()
}

func writeLevel(b *strings.Builder, key, value string) {
	b.WriteByte('.')
	b.WriteString(key)
	if value != "" {
		b.WriteByte('_')
		b.WriteString(value)
	}
}

// parentPath strips the last level, ".key" or ".key_value", from path.
func parentPath(path, key string) string {
	if strings.HasSuffix(path, "."+key) {
		return path[:len(path)-len(key)-1]
	}
	if i := strings.LastIndex(path, "."+key+"_"); i >= 0 {
		return path[:i]
	}
	return path
}

// defaultMaxDetailedSeries is --max-detailed-metric-series' default.
const defaultMaxDetailedSeries = 10_000

// detailedSeries bounds the rule series labelled with request values
// (detailed_metric, value_to_metric): the first max distinct (domain,
// rule) pairs get their own series, for the life of the process; the
// decisions of any other count under the limit's path, and in folded.
// Its methods are safe for concurrent use.
type detailedSeries struct {
	max    int // 0: no bound
	folded prometheus.Counter

	seen sync.Map // seriesKey -> struct{}
	n    atomic.Int64
	mu   sync.Mutex // serialises additions to seen
}

type seriesKey struct{ domain, rule string }

// label returns rule if its series may exist, path otherwise.
func (d *detailedSeries) label(domain, rule, path string) string {
	if d.max <= 0 {
		return rule
	}
	k := seriesKey{domain, rule}
	if _, ok := d.seen.Load(k); ok {
		return rule
	}
	if d.n.Load() < int64(d.max) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := d.seen.Load(k); ok {
			return rule
		}
		if d.n.Load() < int64(d.max) {
			d.seen.Store(k, struct{}{})
			d.n.Add(1)
			return rule
		}
	}
	d.folded.Inc()
	return path
}

// registerProcess registers fastlimit_build_info on reg. (The store's
// circuit breaker has fastlimit_store_breaker_state: see
// registerStoreMetrics.)
func registerProcess(reg prometheus.Registerer, version string) error {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "fastlimit", Name: "build_info",
		Help: "The running build: 1, labelled with its version and Go version.",
	}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	if err := reg.Register(info); err != nil {
		return err
	}
	return nil
}
