// Package metrics counts FastLimit's decisions and rules loads as
// Prometheus series (fastlimit_*): requests by code, latency, per-rule
// hits, over-limit, near-limit and shadow-mode counts, unmatched
// descriptors, and the rules in force.
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
	rule := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fastlimit", Subsystem: "rule", Name: name, Help: help,
		}, []string{"domain", "rule"})
	}
	m := &Metrics{
		farShare:     int64(math.Round((1 - nearRatio) * 1e6)),
		ruleHits:     rule("total_hits_total", "Hits charged against the rule, in requests."),
		ruleOver:     rule("over_limit_total", "Hits over the rule's limit, shadowed ones included."),
		ruleNear:     rule("near_limit_total", "Hits allowed with the rule's remaining at or below the near-limit share."),
		ruleWithin:   rule("within_limit_total", "Hits allowed by the rule."),
		ruleShadow:   rule("shadow_mode_total", "Hits over the rule's limit that shadow mode let through."),
		ruleRefunded: rule("refunded_hits_total", "Hits given back to the rule by descriptors with is_negative_hits; not counted in total_hits_total."),
	}
	m.newRequestSeries()
	m.newConfigSeries()
	m.detailed.max = o.MaxDetailed
	m.detailed.folded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fastlimit", Subsystem: "rule", Name: "detailed_series_folded_total",
		Help: "Decisions of detailed_metric and value_to_metric rules counted under the rule's path, because --max-detailed-metric-series request-labelled series existed.",
	})
	cs := []prometheus.Collector{
		m.ruleHits, m.ruleOver, m.ruleNear, m.ruleWithin, m.ruleShadow, m.ruleRefunded,
		m.duration, m.requests, m.storeErrors, m.globalShadow, m.unmatched,
		m.loads, m.removed, m.info, m.lastOK, m.lastOKTime, m.limits, m.detailed.folded,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// newRequestSeries makes the series of requests: codes, latency, store
// errors, unmatched descriptors and global shadow mode.
func (m *Metrics) newRequestSeries() {
	m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "fastlimit", Name: "request_duration_seconds",
		Help:    "Time to decide a rate-limit request, store round trip included.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
	})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fastlimit", Name: "requests_total",
		Help: "Rate-limit requests by result: OK, OVER_LIMIT, INVALID_ARGUMENT, UNAVAILABLE, or UNKNOWN before the first rules from xDS.",
	}, []string{"code"})
	m.unmatched = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fastlimit", Name: "unmatched_descriptors_total",
		Help: "Descriptors that no rule matched (so nothing limited them), by domain; domains without rules count as \"other\".",
	}, []string{"domain"})
	m.globalShadow = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fastlimit", Name: "global_shadow_mode_total",
		Help: "Requests over limit that global shadow mode (--shadow-mode) answered OK.",
	})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fastlimit", Name: "store_errors_total",
		Help: "Requests that failed because the store did not answer, or answered with an error.",
	})
	m.byCode = map[string]prometheus.Counter{}
	for _, c := range []string{codeOK, codeOverLimit, codeInvalid, codeUnavailable, codeUnknown} {
		m.byCode[c] = m.requests.WithLabelValues(c)
	}
	m.ok, m.over = m.byCode[codeOK], m.byCode[codeOverLimit]
	m.unmatchedOther = m.unmatched.WithLabelValues(otherDomain)
}

// newConfigSeries makes the series of rules loads and the rules in force.
func (m *Metrics) newConfigSeries() {
	m.loads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fastlimit", Subsystem: "config", Name: "loads_total",
		Help: "Loads of the rules directory (or xDS snapshots) by result: success or failure. A failed reload keeps the rules in force.",
	}, []string{"result"})
	m.removed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fastlimit", Subsystem: "config", Name: "domains_removed_total",
		Help: "Domains that a load of the rules removed: their requests are no longer limited (each is logged at warn).",
	})
	m.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "fastlimit", Subsystem: "config", Name: "info",
		Help: "The rules in force: 1, labelled with their hash (SHA-256 of the files' or xDS resources' names and contents).",
	}, []string{"hash"})
	m.lastOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "fastlimit", Subsystem: "config", Name: "last_reload_successful",
		Help: "1 if the last load of the rules directory (or xDS snapshot) succeeded, 0 if it failed and older rules are in force.",
	})
	m.lastOKTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "fastlimit", Subsystem: "config", Name: "last_reload_success_timestamp_seconds",
		Help: "When the rules directory (or an xDS snapshot) last loaded successfully, in Unix seconds.",
	})
	m.limits = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "fastlimit", Subsystem: "config", Name: "limits",
		Help: "Limits in the rules in force.",
	})
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
		if rs := series[st.Limit]; rs != nil {
			m.ruleCached(rs, domain, st)
			continue
		}
		rule := ruleLabel(st.Limit, domain, req, i)
		if rule != st.Limit.Path {
			rule = m.detailed.label(domain, rule, st.Limit.Path)
		}
		m.rule(domain, rule, st)
	}
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
