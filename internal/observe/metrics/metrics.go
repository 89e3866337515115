// Package metrics defines every FastLimit Prometheus series (fastlimit_*),
// each once in a table that docs/metrics.md is generated from, and builds
// their collectors: decisions and rules loads (Metrics), the store, the
// gRPC and HTTP bounds, TLS, the quota service (RLQS) and refstats' own.
package metrics

import (
	"errors"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// Result codes of fastlimit_requests_total.
const (
	codeOK          = "OK"
	codeOverLimit   = "OVER_LIMIT"
	codeInvalid     = "INVALID_ARGUMENT"
	codeUnavailable = "UNAVAILABLE"
	codeUnknown     = "UNKNOWN" // no rules yet (xDS, forced start)
)

// Metrics are the server's Prometheus metrics. As an observer it counts
// every decision; the rules loader reports loads to it. Its methods are
// safe for concurrent use and do not block.
type Metrics struct {
	farShare int64 // 1-nearRatio, in millionths

	ruleHits, ruleOver, ruleNear, ruleWithin, ruleShadow *prometheus.CounterVec
	ruleRefunded                                         *prometheus.CounterVec
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

	loads      *prometheus.CounterVec
	removed    prometheus.Counter
	info       *prometheus.GaugeVec
	lastOK     prometheus.Gauge
	lastOKTime prometheus.Gauge
	limits     prometheus.Gauge
	warnings   prometheus.Gauge
	unmatchedO prometheus.Gauge // entries of the overlay that extend nothing
}

// Options configure Metrics.
type Options struct {
	// NearRatio is the share of a limit used past which allowed hits also
	// count as near the limit, in (0, 1] (default 0.8).
	NearRatio float64
	// MaxDetailed bounds the rule series labelled with request values
	// (detailed_metric, value_to_metric); 0: no bound.
	MaxDetailed int
}

// DefaultMaxDetailedSeries is --max-detailed-metric-series' default.
const DefaultMaxDetailedSeries = 10_000

// New registers the server's metrics, and the Go runtime and process
// collectors, on reg.
func New(reg prometheus.Registerer, o Options) (*Metrics, error) {
	nearRatio := o.NearRatio
	if nearRatio == 0 {
		nearRatio = 0.8
	}
	m := &Metrics{
		farShare:     int64(math.Round((1 - nearRatio) * 1e6)),
		ruleHits:     ruleHitsDef.counterVec(),
		ruleOver:     ruleOverDef.counterVec(),
		ruleNear:     ruleNearDef.counterVec(),
		ruleWithin:   ruleWithinDef.counterVec(),
		ruleShadow:   ruleShadowDef.counterVec(),
		ruleRefunded: ruleRefundedDef.counterVec(),
	}
	m.newRequestSeries()
	m.newConfigSeries()
	m.detailed.max = o.MaxDetailed
	m.detailed.folded = detailedFoldedDef.counter()
	cs := []prometheus.Collector{
		m.ruleHits, m.ruleOver, m.ruleNear, m.ruleWithin, m.ruleShadow, m.ruleRefunded,
		m.duration, m.requests, m.storeErrors, m.globalShadow, m.unmatched,
		m.loads, m.removed, m.info, m.lastOK, m.lastOKTime, m.limits, m.warnings, m.unmatchedO, m.detailed.folded,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	return m, register(reg, cs...)
}

// newRequestSeries makes the series of requests: codes, latency, store
// errors, unmatched descriptors and global shadow mode.
func (m *Metrics) newRequestSeries() {
	m.duration = durationDef.histogram()
	m.requests = requestsDef.counterVec()
	m.unmatched = unmatchedDef.counterVec()
	m.globalShadow = globalShadowDef.counter()
	m.storeErrors = storeErrorsDef.counter()
	m.byCode = map[string]prometheus.Counter{}
	for _, c := range []string{codeOK, codeOverLimit, codeInvalid, codeUnavailable, codeUnknown} {
		m.byCode[c] = m.requests.WithLabelValues(c)
	}
	m.ok, m.over = m.byCode[codeOK], m.byCode[codeOverLimit]
	m.unmatchedOther = m.unmatched.WithLabelValues(otherDomain)
}

// newConfigSeries makes the series of rules loads and the rules in force.
func (m *Metrics) newConfigSeries() {
	m.loads = loadsDef.counterVec()
	m.removed = removedDef.counter()
	m.info = infoDef.gaugeVec()
	m.lastOK = lastOKDef.gauge()
	m.lastOKTime = lastOKTimeDef.gauge()
	m.limits = limitsDef.gauge()
	m.warnings = warningsDef.gauge()
	m.unmatchedO = overlayUnmatchedDef.gauge()
	for _, r := range []string{"success", "failure"} {
		m.loads.WithLabelValues(r)
	}
}

// GlobalShadowed counts an OVER_LIMIT answer that global shadow mode
// turned OK.
func (m *Metrics) GlobalShadowed() { m.globalShadow.Inc() }

// Decided counts a decision. req, when not nil, shows the request's
// descriptors, one per status, whose entries give the values that
// detailed_metric and value_to_metric rules put in their rule label.
func (m *Metrics) Decided(domain string, req limiter.View, res *limiter.Response, took time.Duration) {
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
		if st.Parts == nil {
			m.count(series, domain, req, i, st)
			continue
		}
		for j := range st.Parts { // each limit of a rule with several, under its own label
			m.count(series, domain, req, i, &st.Parts[j])
		}
	}
}

// count counts the status st of req's descriptor i under its limit's rule label.
func (m *Metrics) count(series map[*descriptors.Limit]*ruleSeries, domain string, req limiter.View, i int, st *limiter.Status) {
	if rs := series[st.Limit]; rs != nil {
		m.ruleCached(rs, domain, st)
		return
	}
	rule := ruleLabel(st.Limit, domain, req, i)
	if rule != baseLabel(st.Limit) {
		rule = m.detailed.label(domain, rule, st.Limit.Label())
	}
	m.rule(domain, rule, st)
}

// otherDomain labels unmatched descriptors of domains without rules.
const otherDomain = "other"

// unmatchedIn returns the unmatched counter of domain.
func (m *Metrics) unmatchedIn(domain string) prometheus.Counter {
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
func (m *Metrics) near(st *limiter.Status) bool {
	lim := st.Limit
	if lim.Unlimited {
		return false
	}
	return float64(st.Remaining)*descriptors.Milli*1e6 <= float64(m.farShare)*float64(lim.Allowance())
}

// Failed counts a request that failed: invalid, no rules yet, or a store
// failure.
func (m *Metrics) Failed(_ string, err error, took time.Duration) {
	m.duration.Observe(took.Seconds())
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		m.byCode[codeInvalid].Inc()
		return
	case errors.Is(err, limiter.ErrNoRules):
		m.byCode[codeUnknown].Inc()
		return
	}
	m.byCode[codeUnavailable].Inc()
	m.storeErrors.Inc()
}

// Loaded records a successful load of rules, changed or not.
func (m *Metrics) Loaded(r *rules.Loaded, changed bool) {
	m.loads.WithLabelValues("success").Inc()
	m.lastOK.Set(1)
	m.lastOKTime.SetToCurrentTime()
	if changed {
		m.info.Reset()
		m.info.WithLabelValues(r.Hash).Set(1)
		m.limits.Set(float64(len(r.Set.Limits())))
		m.warnings.Set(float64(len(r.Warnings)))
		m.unmatchedO.Set(float64(r.OverlayUnmatched))
		m.cacheSeries(r.Set)
	}
}

// DomainsRemoved records the domains a load removed.
func (m *Metrics) DomainsRemoved(domains []string) { m.removed.Add(float64(len(domains))) }

// LoadFailed records a failed load; the rules in force stay.
func (m *Metrics) LoadFailed() {
	m.loads.WithLabelValues("failure").Inc()
	m.lastOK.Set(0)
}

// RegisterBuildInfo registers fastlimit_build_info on reg.
func RegisterBuildInfo(reg prometheus.Registerer, version string) error {
	info := buildInfoDef.gaugeVec()
	info.WithLabelValues(version, runtime.Version()).Set(1)
	return reg.Register(info)
}
