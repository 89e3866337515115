package rlqs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// unknownDomain labels the series of domains the rules do not name, so
// that Envoys cannot grow the label set at will.
const unknownDomain = "_unknown"

// metrics are the service's Prometheus series. Counters count as events
// happen; the gauges are read from the service's state at scrape time.
type metrics struct {
	svc *Service

	reports, bucketReports, subscriptions *prometheus.CounterVec
	requests                              *prometheus.CounterVec
	actionsSent, pushes, abandons         *prometheus.CounterVec
	emptyIDs                              *prometheus.CounterVec
	storeErrors, exchangeItems            prometheus.Counter
	exchangeSeconds                       prometheus.Histogram

	streamsDesc, bucketsDesc, limitsDesc, limitRateDesc, assignedDesc, demandDesc *prometheus.Desc
}

func newMetrics(s *Service, reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fastlimit_rlqs_" + name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("fastlimit_rlqs_"+name, help, []string{"domain"}, nil)
	}
	m := &metrics{
		svc:           s,
		reports:       counter("reports_total", "Usage reports received.", "domain"),
		bucketReports: counter("bucket_reports_total", "Bucket usages received (a report carries one per bucket).", "domain"),
		subscriptions: counter("subscriptions_total", "Buckets subscribed (first reported on a stream).", "domain"),
		requests:      counter("requests_total", "Requests Envoys reported, by their local decision.", "domain", "decision"),
		actionsSent:   counter("actions_total", "Bucket actions sent to Envoys.", "domain"),
		pushes:        counter("pushes_total", "Assignments sent to an Envoy because another Envoy's report changed its share.", "domain"),
		abandons:      counter("abandoned_total", "Buckets abandoned for being idle.", "domain"),
		emptyIDs:      counter("empty_bucket_ids_total", "Bucket usages with an empty bucket id, which no action can answer.", "domain"),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "fastlimit_rlqs_store_errors_total",
			Help: "Demand store exchanges that failed; --rlqs-on-store-error decided the shares."}),
		exchangeItems: prometheus.NewCounter(prometheus.CounterOpts{Name: "fastlimit_rlqs_store_exchange_items_total",
			Help: "Bucket items written, deleted or read in demand store exchanges."}),
		exchangeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fastlimit_rlqs_store_exchange_seconds",
			Help: "Time of one demand store exchange (one round trip).", Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14)}),
		streamsDesc:   gauge("streams", "Envoy streams open on this replica."),
		bucketsDesc:   gauge("buckets", "Buckets the Envoys of this replica hold (one per stream and bucket)."),
		limitsDesc:    gauge("limits", "Limits divided on this replica (buckets sharing a counter count once)."),
		limitRateDesc: gauge("limit_rate", "Sum of the global rates (requests per second) of the limits divided on this replica."),
		assignedDesc:  gauge("assigned_rate", "Sum of the rates (requests per second) assigned to this replica's Envoys."),
		demandDesc:    gauge("demand_rate", "Sum of the measured demand (requests per second) of this replica's Envoys."),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reports, m.bucketReports, m.subscriptions, m.requests, m.actionsSent,
		m.pushes, m.abandons, m.emptyIDs, m.storeErrors, m.exchangeItems, m.exchangeSeconds, m} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// label is a domain's label value.
func (m *metrics) label(domain string) string {
	if m.svc.opts.Rules().Domain(domain) == nil {
		return unknownDomain
	}
	return domain
}

func (m *metrics) report(domain string, buckets, subs int) {
	d := m.label(domain)
	m.reports.WithLabelValues(d).Inc()
	m.bucketReports.WithLabelValues(d).Add(float64(buckets))
	m.subscriptions.WithLabelValues(d).Add(float64(subs))
}

func (m *metrics) usage(domain string, allowed, denied uint64) {
	d := m.label(domain)
	m.requests.WithLabelValues(d, "allowed").Add(float64(allowed))
	m.requests.WithLabelValues(d, "denied").Add(float64(denied))
}

func (m *metrics) actions(domain string, n int) {
	m.actionsSent.WithLabelValues(m.label(domain)).Add(float64(n))
}
func (m *metrics) pushed(domain string)    { m.pushes.WithLabelValues(m.label(domain)).Inc() }
func (m *metrics) abandoned(domain string) { m.abandons.WithLabelValues(m.label(domain)).Inc() }
func (m *metrics) emptyID(domain string)   { m.emptyIDs.WithLabelValues(m.label(domain)).Inc() }
func (m *metrics) storeError()             { m.storeErrors.Inc() }

func (m *metrics) exchanged(took time.Duration, items int) {
	m.exchangeSeconds.Observe(took.Seconds())
	m.exchangeItems.Add(float64(items))
}

// Describe implements prometheus.Collector for the gauges.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.streamsDesc, m.bucketsDesc, m.limitsDesc, m.limitRateDesc, m.assignedDesc, m.demandDesc} {
		ch <- d
	}
}

// domainState sums one domain's gauges.
type domainState struct {
	streams, buckets, limits            float64
	limitRate, assignedRate, demandRate float64
}

// Collect implements prometheus.Collector: it reads the gauges from the
// service's state.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for d, st := range m.svc.state() {
		for desc, v := range map[*prometheus.Desc]float64{
			m.streamsDesc: st.streams, m.bucketsDesc: st.buckets, m.limitsDesc: st.limits,
			m.limitRateDesc: st.limitRate, m.assignedDesc: st.assignedRate, m.demandDesc: st.demandRate,
		} {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, d)
		}
	}
}

// state sums the state of every domain served.
func (s *Service) state() map[string]*domainState {
	out := map[string]*domainState{}
	get := func(domain string) *domainState {
		d := s.metrics.label(domain)
		if out[d] == nil {
			out[d] = &domainState{}
		}
		return out[d]
	}
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	pools := make([]*pool, 0, len(s.pools))
	for _, p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.mu.Lock()
		domain, n := st.domain, len(st.buckets)
		st.mu.Unlock()
		if domain == "" {
			continue
		}
		d := get(domain)
		d.streams++
		d.buckets += float64(n)
	}
	for _, p := range pools {
		d := get(p.domain)
		p.mu.Lock()
		d.limits++
		d.limitRate += p.q.Limit.Rate
		p.q.Clients(func(c *quota.Client) {
			d.assignedRate += c.Assigned
			if c.Known {
				d.demandRate += c.Demand
			}
		})
		p.mu.Unlock()
	}
	return out
}
