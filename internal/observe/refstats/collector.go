package refstats

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/statsd"
	"github.com/fastlimit/fastlimit/internal/observe/statsmap"
)

// defaultRefHelp is the help of a mapped series whose mapping has none.
const defaultRefHelp = "An envoyproxy/ratelimit stat, mapped from its statsd name by PROMETHEUS_MAPPER_YAML (or the built-in mapping)."

// collector exports a statsd.Store to Prometheus under the names and
// labels that a statsmap.Mapper gives its stats, as the reference's
// Prometheus sink (statsd_exporter's mapper) does: stats that map to one
// series are summed, dropped stats are not exported, a stat that maps to
// a name already used by another type is skipped (and counted), and a
// counter appears once it has counted. It is an unchecked collector: its
// series are only known as stats appear.
type collector struct {
	store     *statsd.Store
	mapper    *statsmap.Mapper
	conflicts prometheus.Counter

	mu        sync.Mutex
	mapped    map[*statsd.Counter]*refSeries // nil entry: not exported
	gauged    map[*statsd.Gauge]*refSeries   // the same for gauges
	families  map[string]family              // by name: first type and help wins
	observers []prometheus.Collector         // histograms and summaries of timers
	obsByID   map[string]refObserver         // the same, by name and labels
}

type refObserver struct {
	o     prometheus.Observer
	scale float64
}

type family struct {
	kind statKind
	help string
}

// statKind is how a family is exported; a name keeps its first kind.
type statKind uint8

const (
	kindCounter statKind = iota
	kindGauge
	kindObserver
)

// refSeries is one exported counter series.
type refSeries struct {
	id     string // name and labels
	desc   *prometheus.Desc
	values []string
}

func newCollector(store *statsd.Store, m *statsmap.Mapper, reg prometheus.Registerer) (*collector, error) {
	c := &collector{
		store: store, mapper: m, conflicts: metrics.RefStatsConflicts(),
		mapped:   map[*statsd.Counter]*refSeries{},
		gauged:   map[*statsd.Gauge]*refSeries{},
		families: map[string]family{},
		obsByID:  map[string]refObserver{},
	}
	if err := reg.Register(c.conflicts); err != nil {
		return nil, err
	}
	return c, nil
}

// Describe sends nothing: the collector is unchecked.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends every counter series with a count, the gauges and the
// timers, after the store's generators have set the generated stats.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.store.Generate()
	counters := c.store.Counters()
	gauges := c.store.Gauges()
	c.mu.Lock()
	type sum struct {
		s *refSeries
		v float64
	}
	var order []*sum
	sums := map[string]*sum{}
	for _, ctr := range counters {
		v := ctr.Value()
		if v == 0 {
			continue
		}
		s, ok := c.mapped[ctr]
		if !ok {
			s = c.series(ctr.Name())
			c.mapped[ctr] = s
		}
		if s == nil {
			continue
		}
		if t := sums[s.id]; t != nil {
			t.v += float64(v)
			continue
		}
		t := &sum{s, float64(v)}
		sums[s.id] = t
		order = append(order, t)
	}
	var gaugeOrder []*sum
	gaugeSums := map[string]*sum{}
	for _, g := range gauges {
		s, ok := c.gauged[g]
		if !ok {
			s = c.gaugeSeries(g.Name())
			c.gauged[g] = s
		}
		if s == nil {
			continue
		}
		// Gauges that map to one series: the last wins, as statsd_exporter
		// keeps the last value set.
		if t := gaugeSums[s.id]; t != nil {
			t.v = float64(g.Value())
			continue
		}
		t := &sum{s, float64(g.Value())}
		gaugeSums[s.id] = t
		gaugeOrder = append(gaugeOrder, t)
	}
	obs := c.observers
	c.mu.Unlock()
	for _, t := range order {
		ch <- prometheus.MustNewConstMetric(t.s.desc, prometheus.CounterValue, t.v, t.s.values...)
	}
	for _, t := range gaugeOrder {
		ch <- prometheus.MustNewConstMetric(t.s.desc, prometheus.GaugeValue, t.v, t.s.values...)
	}
	for _, o := range obs {
		o.Collect(ch)
	}
}

// series maps a counter's stat; nil when it is dropped or conflicts.
// c.mu is held.
func (c *collector) series(stat string) *refSeries {
	return c.constSeries(stat, statsmap.Counter, kindCounter)
}

// gaugeSeries maps a gauge's stat as series does a counter's.
func (c *collector) gaugeSeries(stat string) *refSeries {
	return c.constSeries(stat, statsmap.Gauge, kindGauge)
}

func (c *collector) constSeries(stat string, t statsmap.Type, kind statKind) *refSeries {
	r := c.mapper.Map(stat, t)
	if r.Drop || r.Name == "" {
		return nil
	}
	f, ok := c.family(r, kind)
	if !ok {
		return nil
	}
	names := make([]string, len(r.Labels))
	values := make([]string, len(r.Labels))
	for i, l := range r.Labels {
		names[i], values[i] = l.Name, l.Value
	}
	return &refSeries{id: seriesID(r), desc: prometheus.NewDesc(r.Name, f.help, names, nil), values: values}
}

// seriesID identifies a series by its name and labels.
func seriesID(r statsmap.Result) string {
	var id strings.Builder
	id.WriteString(r.Name)
	for _, l := range r.Labels {
		id.WriteString("\xff" + l.Name + "\xfe" + l.Value)
	}
	return id.String()
}

// family returns the family of r's name, registering it as a counter, a
// gauge or an observer; false when the name is taken by another kind.
// c.mu is held.
func (c *collector) family(r statsmap.Result, kind statKind) (family, bool) {
	f, ok := c.families[r.Name]
	if !ok {
		f = family{kind: kind, help: r.Help}
		if f.help == "" {
			f.help = defaultRefHelp
		}
		c.families[r.Name] = f
	}
	if f.kind != kind {
		c.conflicts.Inc()
		return f, false
	}
	return f, true
}

// observer returns the histogram or summary that a timer stat maps to
// and the scale of its values; nil when it is dropped or conflicts.
func (c *collector) observer(stat string) (prometheus.Observer, float64) {
	r := c.mapper.Map(stat, statsmap.Observer)
	if r.Drop || r.Name == "" {
		return nil, 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id := seriesID(r)
	if ro, ok := c.obsByID[id]; ok {
		return ro.o, ro.scale
	}
	f, ok := c.family(r, kindObserver)
	if !ok {
		return nil, 1
	}
	labels := prometheus.Labels{}
	for _, l := range r.Labels {
		labels[l.Name] = l.Value
	}
	var o interface {
		prometheus.Observer
		prometheus.Collector
	}
	if r.Observer == statsmap.Histogram {
		o = prometheus.NewHistogram(prometheus.HistogramOpts{Name: r.Name, Help: f.help, ConstLabels: labels, Buckets: r.Buckets})
	} else {
		objs := map[float64]float64{}
		for _, q := range r.Objectives {
			objs[q.Quantile] = q.Error
		}
		o = prometheus.NewSummary(prometheus.SummaryOpts{Name: r.Name, Help: f.help, ConstLabels: labels, Objectives: objs})
	}
	c.observers = append(c.observers, o)
	c.obsByID[id] = refObserver{o, r.Scale}
	return o, r.Scale
}
