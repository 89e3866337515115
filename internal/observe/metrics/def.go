package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// kind is a series' Prometheus type.
type kind uint8

const (
	counter kind = iota
	gauge
	histogram
)

func (k kind) String() string { return [...]string{"counter", "gauge", "histogram"}[k] }

// def defines one series: its name, type, help and labels as Prometheus
// shows them, and what docs/metrics.md says of when it is exported. Every
// collector of the package is built from one.
type def struct {
	name    string
	kind    kind
	help    string
	labels  []string
	buckets []float64 // a histogram's upper bounds
	// when says when the series is exported: "" always.
	when string
	// see is the page of docs/ that says more, as page.md#anchor.
	see string
}

// tables are every FastLimit series, by table of docs/metrics.md.
var tables = []struct {
	name string
	defs []*def
}{
	{"server", concat(decisionDefs, configDefs, storeDefs, refStatsDefs, buildDefs)},
	{"connections", concat(grpcDefs, httpDefs, tlsDefs)},
	{"rlqs", rlqsDefs},
	{"admin", adminDefs},
}

func concat(lists ...[]*def) []*def {
	var all []*def
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

func (d *def) counterVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.name, Help: d.help}, d.labels)
}

func (d *def) counter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: d.name, Help: d.help})
}

func (d *def) gaugeVec() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: d.name, Help: d.help}, d.labels)
}

func (d *def) gauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: d.name, Help: d.help})
}

func (d *def) histogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: d.name, Help: d.help, Buckets: d.buckets})
}

// read is a counter or gauge, by d's kind, whose value f reads at scrape
// time.
func (d *def) read(f func() float64) prometheus.Collector {
	if d.kind == counter {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: d.name, Help: d.help}, f)
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: d.name, Help: d.help}, f)
}

// desc describes d's series for a collector that makes them at scrape
// time; valueType is their type.
func (d *def) desc() *prometheus.Desc { return prometheus.NewDesc(d.name, d.help, d.labels, nil) }

func (d *def) valueType() prometheus.ValueType {
	if d.kind == counter {
		return prometheus.CounterValue
	}
	return prometheus.GaugeValue
}

// register registers cs on reg, each tried, and returns their errors.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}
