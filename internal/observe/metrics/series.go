package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

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

// ruleKind names one of a rule's counters.
type ruleKind int

const (
	kindHits ruleKind = iota
	kindOver
	kindNear
	kindWithin
	kindShadow
	kindRefunded
	ruleKinds
)

// vec returns the counters of kind k.
func (m *Metrics) vec(k ruleKind) *prometheus.CounterVec {
	return [ruleKinds]*prometheus.CounterVec{m.ruleHits, m.ruleOver, m.ruleNear, m.ruleWithin, m.ruleShadow, m.ruleRefunded}[k]
}

// tally calls add with each of st's rule counters and the hits st adds to
// it: a refund only to refunded, other hits to total hits and to over
// (and shadow), or within (and near).
func (m *Metrics) tally(st *limiter.Status, add func(k ruleKind, hits float64)) {
	hits := countedHits(st)
	if st.Refund {
		add(kindRefunded, hits)
		return
	}
	add(kindHits, hits)
	switch {
	case st.Shadowed:
		add(kindOver, hits)
		add(kindShadow, hits)
	case st.Code == limiter.OverLimit:
		add(kindOver, hits)
	default:
		add(kindWithin, hits)
		if m.near(st) {
			add(kindNear, hits)
		}
	}
}

// rule counts st under the rule label rule.
func (m *Metrics) rule(domain, rule string, st *limiter.Status) {
	m.tally(st, func(k ruleKind, hits float64) { m.vec(k).WithLabelValues(domain, rule).Add(hits) })
}

// ruleCached counts as rule does, through the rule's resolved counters.
func (m *Metrics) ruleCached(rs *ruleSeries, domain string, st *limiter.Status) {
	m.tally(st, func(k ruleKind, hits float64) { rs.c[k].get(m.vec(k), domain, rs.rule).Add(hits) })
}

// ruleSeries are the counters of one configured limit whose rule label
// takes no request values (baseLabel). Each is resolved on its first
// count, so that a series appears only once it counts, as with
// WithLabelValues.
type ruleSeries struct {
	rule string
	c    [ruleKinds]lazyCounter // by kind
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
func (m *Metrics) cacheSeries(set *descriptors.Set) {
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
		all[i].rule = baseLabel(l)
		series[l] = &all[i]
	}
	m.series.Store(&series)
}

// ruleLabel is the rule label of a status's limit: baseLabel, or the
// limit's path with the values of req's descriptor i for rules that ask
// for them, as envoyproxy/ratelimit names their stats. detailed_metric puts every
// entry of the request in ("domain.key_value.key2_value2");
// value_to_metric replaces the matched level's configured value (a
// wildcard, or none) with the request's; one of several limits of a rule
// keeps its Label's "#" part after either. Without entries it is baseLabel.
func ruleLabel(lim *descriptors.Limit, domain string, req limiter.View, i int) string {
	if !(lim.DetailedMetric || lim.ValueToMetric) || req == nil || i >= req.Len() || req.Entries(i) == 0 {
		return baseLabel(lim)
	}
	member := lim.Label()[len(lim.Path):] // "#daily" of one of several limits
	return ruleValues(lim, domain, req, i) + member
}

// ruleValues is ruleLabel's path with the request's values.
func ruleValues(lim *descriptors.Limit, domain string, req limiter.View, i int) string {
	var b strings.Builder
	n := req.Entries(i)
	if lim.DetailedMetric {
		b.WriteString(domain)
		for j := range n {
			key, value := req.Entry(i, j)
			writeLevel(&b, key, value)
		}
		return validLabel(b.String())
	}
	key, value := req.Entry(i, n-1)
	b.WriteString(parentPath(lim.Path, key))
	writeLevel(&b, key, value)
	return validLabel(b.String())
}

// baseLabel is the rule label of a limit whose label takes no request
// values: its name where set, else its Label (its path).
func baseLabel(lim *descriptors.Limit) string {
	if lim.Name != "" && !(lim.DetailedMetric || lim.ValueToMetric) {
		return lim.Name
	}
	return lim.Label()
}

// validLabel makes a label value of request bytes UTF-8, as Prometheus
// requires, replacing what is not with U+FFFD.
func validLabel(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
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
