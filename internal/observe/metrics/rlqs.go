package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

const rlqsOn = "`--rlqs` on"

// domainLabel labels the quota service's series.
var domainLabel = []string{"domain"}

// The quota service's series: counters of its events (RLQS as an
// rlqs.Observer) and gauges of its state, read at scrape time.
var (
	rlqsStreamsDef = def{name: "fastlimit_rlqs_streams", kind: gauge, labels: domainLabel, when: rlqsOn,
		help: "Envoy streams open on this replica."}
	rlqsBucketsDef = def{name: "fastlimit_rlqs_buckets", kind: gauge, labels: domainLabel, when: rlqsOn,
		help: "Buckets the Envoys of this replica hold (one per stream and bucket)."}
	rlqsLimitsDef = def{name: "fastlimit_rlqs_limits", kind: gauge, labels: domainLabel, when: rlqsOn,
		help: "Limits divided on this replica (buckets sharing a counter count once)."}
	rlqsLimitRateDef = def{name: "fastlimit_rlqs_limit_rate", kind: gauge, labels: domainLabel, when: rlqsOn,
		help: "Sum of the global rates (requests per second) of the limits divided on this replica."}
	rlqsAssignedDef = def{name: "fastlimit_rlqs_assigned_rate", kind: gauge, labels: domainLabel, when: rlqsOn,
		help: "Sum of the rates (requests per second) assigned to this replica's Envoys."}
	rlqsDemandDef = def{name: "fastlimit_rlqs_demand_rate", kind: gauge, labels: domainLabel, when: rlqsOn,
		help: "Sum of the measured demand (requests per second) of this replica's Envoys."}
	rlqsReportsDef = def{name: "fastlimit_rlqs_reports_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Usage reports received."}
	rlqsBucketReportsDef = def{name: "fastlimit_rlqs_bucket_reports_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Bucket usages received (a report carries one per bucket)."}
	rlqsSubscriptionsDef = def{name: "fastlimit_rlqs_subscriptions_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Buckets subscribed (first reported on a stream)."}
	rlqsRequestsDef = def{name: "fastlimit_rlqs_requests_total", kind: counter, labels: []string{"domain", "decision"}, when: rlqsOn,
		help: "Requests Envoys reported, by their local decision."}
	rlqsActionsDef = def{name: "fastlimit_rlqs_actions_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Bucket actions sent to Envoys."}
	rlqsPushesDef = def{name: "fastlimit_rlqs_pushes_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Assignments sent to an Envoy because another Envoy's report changed its share."}
	rlqsAbandonedDef = def{name: "fastlimit_rlqs_abandoned_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Buckets abandoned for being idle."}
	rlqsEmptyIDsDef = def{name: "fastlimit_rlqs_empty_bucket_ids_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Bucket usages with an empty bucket id, which no action can answer."}
	rlqsUnmatchedDef = def{name: "fastlimit_rlqs_unmatched_buckets_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Buckets subscribed that match no rule, assigned --rlqs-unmatched (each id is logged once, at most 10 ids a second)."}
	rlqsSilentDef = def{name: "fastlimit_rlqs_silent_streams_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Streams ended for sending no report for 3 report periods; their buckets stop counting."}
	rlqsRefusedDef = def{name: "fastlimit_rlqs_refused_reports_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Usage reports refused for being larger than --rlqs-max-report-bytes; their stream ends."}
	rlqsUnidentifiedDef = def{name: "fastlimit_rlqs_unidentified_streams_total", kind: counter, when: rlqsOn,
		help: "Streams refused (Unauthenticated) for naming no client identity, with --rlqs-require-client-identity."}
	rlqsRefusedBucketsDef = def{name: "fastlimit_rlqs_refused_buckets_total", kind: counter, labels: []string{"domain", "reason"}, when: rlqsOn,
		help: "New buckets refused, answered nothing (Envoy's no_assignment_behavior applies), by the bound they would pass: stream (--rlqs-max-buckets-per-stream), server (--rlqs-max-buckets) or id (--max-entries, --max-entry-bytes); counted at each report naming them."}
	rlqsRefusedStreamsDef = def{name: "fastlimit_rlqs_refused_streams_total", kind: counter, when: rlqsOn,
		help: "RLQS streams refused with ResourceExhausted: --rlqs-max-streams were open."}
	rlqsShedDef = def{name: "fastlimit_rlqs_shed_reports_total", kind: counter, labels: domainLabel, when: rlqsOn,
		help: "Usage reports merged into the one their stream had waiting for a worker (--rlqs-report-workers): report work shed."}
	rlqsStoreErrorsDef = def{name: "fastlimit_rlqs_store_errors_total", kind: counter, when: rlqsOn,
		help: "Demand store exchanges that failed; --rlqs-on-store-error decided the shares."}
	rlqsExchangeSecondsDef = def{name: "fastlimit_rlqs_store_exchange_seconds", kind: histogram, when: rlqsOn,
		help:    "Time of one demand store exchange (one round trip).",
		buckets: prometheus.ExponentialBuckets(0.0002, 2, 14)}
	rlqsExchangeItemsDef = def{name: "fastlimit_rlqs_store_exchange_items_total", kind: counter, when: rlqsOn,
		help: "Bucket items written, deleted or read in demand store exchanges."}

	rlqsProcessRestartsDef = def{name: "fastlimit_rlqs_process_restarts_total", kind: counter, when: "`--rlqs-process` on", see: "rlqs.md#rlqs-in-a-process-of-its-own",
		help: "Times the RLQS child process (--rlqs-process) was started again after it exited on its own."}
	rlqsDefs = []*def{&rlqsStreamsDef, &rlqsBucketsDef, &rlqsLimitsDef, &rlqsLimitRateDef, &rlqsAssignedDef, &rlqsDemandDef,
		&rlqsReportsDef, &rlqsBucketReportsDef, &rlqsSubscriptionsDef, &rlqsRequestsDef, &rlqsActionsDef, &rlqsPushesDef,
		&rlqsAbandonedDef, &rlqsEmptyIDsDef, &rlqsUnmatchedDef, &rlqsSilentDef, &rlqsRefusedDef,
		&rlqsUnidentifiedDef, &rlqsRefusedBucketsDef, &rlqsRefusedStreamsDef, &rlqsShedDef,
		&rlqsStoreErrorsDef, &rlqsExchangeSecondsDef, &rlqsExchangeItemsDef, &rlqsProcessRestartsDef}
)

// RLQSTotals are one domain's quota state; rlqs.DomainTotals converts
// to it.
type RLQSTotals struct {
	Streams, Buckets, Limits            int
	LimitRate, AssignedRate, DemandRate float64
}

// RLQS counts the quota service's events as an rlqs.Observer, and
// exports its state at scrape time. Its methods are safe for concurrent
// use and do not block.
type RLQS struct {
	reports, bucketReports, subscriptions *prometheus.CounterVec
	requests                              *prometheus.CounterVec
	actions, pushes, abandons, emptyIDs   *prometheus.CounterVec
	unmatched, silent, refused            *prometheus.CounterVec
	unidentified                          prometheus.Counter
	refusedBuckets                        *prometheus.CounterVec
	storeErrors, exchangeItems            prometheus.Counter
	refusedStreams                        prometheus.Counter
	exchangeSeconds                       prometheus.Histogram
	shed                                  *prometheus.CounterVec
}

// NewRLQS registers the quota service's series on reg; totals reads its
// state, by domain, at each scrape.
func NewRLQS(reg prometheus.Registerer, totals func() map[string]RLQSTotals) (*RLQS, error) {
	m := &RLQS{
		reports:         rlqsReportsDef.counterVec(),
		bucketReports:   rlqsBucketReportsDef.counterVec(),
		subscriptions:   rlqsSubscriptionsDef.counterVec(),
		requests:        rlqsRequestsDef.counterVec(),
		actions:         rlqsActionsDef.counterVec(),
		pushes:          rlqsPushesDef.counterVec(),
		abandons:        rlqsAbandonedDef.counterVec(),
		emptyIDs:        rlqsEmptyIDsDef.counterVec(),
		unmatched:       rlqsUnmatchedDef.counterVec(),
		silent:          rlqsSilentDef.counterVec(),
		refused:         rlqsRefusedDef.counterVec(),
		unidentified:    rlqsUnidentifiedDef.counter(),
		refusedBuckets:  rlqsRefusedBucketsDef.counterVec(),
		refusedStreams:  rlqsRefusedStreamsDef.counter(),
		storeErrors:     rlqsStoreErrorsDef.counter(),
		exchangeItems:   rlqsExchangeItemsDef.counter(),
		exchangeSeconds: rlqsExchangeSecondsDef.histogram(),
		shed:            rlqsShedDef.counterVec(),
	}
	gauges := &rlqsCollector{totals: totals}
	for _, d := range []*def{&rlqsStreamsDef, &rlqsBucketsDef, &rlqsLimitsDef, &rlqsLimitRateDef, &rlqsAssignedDef, &rlqsDemandDef} {
		gauges.descs = append(gauges.descs, d.desc())
	}
	return m, register(reg, m.reports, m.bucketReports, m.subscriptions, m.requests, m.actions,
		m.pushes, m.abandons, m.emptyIDs, m.unmatched, m.silent, m.refused, m.unidentified, m.refusedBuckets, m.refusedStreams, m.storeErrors, m.exchangeItems, m.exchangeSeconds, m.shed, gauges)
}

// Reported counts a usage report, its bucket usages and subscriptions.
func (m *RLQS) Reported(domain string, buckets, subscribed int) {
	m.reports.WithLabelValues(domain).Inc()
	m.bucketReports.WithLabelValues(domain).Add(float64(buckets))
	m.subscriptions.WithLabelValues(domain).Add(float64(subscribed))
}

// Requests counts the requests an Envoy reported, by its decision.
func (m *RLQS) Requests(domain string, allowed, denied uint64) {
	m.requests.WithLabelValues(domain, "allowed").Add(float64(allowed))
	m.requests.WithLabelValues(domain, "denied").Add(float64(denied))
}

// ReportsShed counts reports merged into a waiting one.
func (m *RLQS) ReportsShed(domain string, n int) { m.shed.WithLabelValues(domain).Add(float64(n)) }

// ActionsSent counts bucket actions sent.
func (m *RLQS) ActionsSent(domain string, n int) { m.actions.WithLabelValues(domain).Add(float64(n)) }

// Pushed counts an assignment pushed.
func (m *RLQS) Pushed(domain string) { m.pushes.WithLabelValues(domain).Inc() }

// Abandoned counts an idle bucket abandoned.
func (m *RLQS) Abandoned(domain string) { m.abandons.WithLabelValues(domain).Inc() }

// EmptyBucketID counts a bucket usage without an id.
func (m *RLQS) EmptyBucketID(domain string) { m.emptyIDs.WithLabelValues(domain).Inc() }

// Unmatched counts a bucket that matches no rule.
func (m *RLQS) Unmatched(domain string) { m.unmatched.WithLabelValues(domain).Inc() }

// Silent counts a stream ended for its silence.
func (m *RLQS) Silent(domain string) { m.silent.WithLabelValues(domain).Inc() }

// ReportRefused counts a report refused for its size.
func (m *RLQS) ReportRefused(domain string) { m.refused.WithLabelValues(domain).Inc() }

// Unidentified counts a stream refused for naming no client identity.
func (m *RLQS) Unidentified() { m.unidentified.Inc() }

// BucketsRefused counts new buckets refused, by reason.
func (m *RLQS) BucketsRefused(domain, reason string, n int) {
	m.refusedBuckets.WithLabelValues(domain, reason).Add(float64(n))
}

// StreamRefused counts a stream refused.
func (m *RLQS) StreamRefused() { m.refusedStreams.Inc() }

// StoreFailed counts a failed demand store exchange.
func (m *RLQS) StoreFailed() { m.storeErrors.Inc() }

// Exchanged records a demand store exchange's time and items.
func (m *RLQS) Exchanged(took time.Duration, items int) {
	m.exchangeSeconds.Observe(took.Seconds())
	m.exchangeItems.Add(float64(items))
}

// rlqsCollector exports the quota service's gauges, in the order of
// rlqsDefs: streams, buckets, limits, limit, assigned and demand rates.
type rlqsCollector struct {
	totals func() map[string]RLQSTotals
	descs  []*prometheus.Desc
}

func (c *rlqsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *rlqsCollector) Collect(ch chan<- prometheus.Metric) {
	for domain, t := range c.totals() {
		for i, v := range []float64{float64(t.Streams), float64(t.Buckets), float64(t.Limits), t.LimitRate, t.AssignedRate, t.DemandRate} {
			ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.GaugeValue, v, domain)
		}
	}
}

// RLQSChildPrefix begins the names of the series that --rlqs-process's
// child exports and its parent's /metrics serves: RLQS's own (the
// child's runtime and store series would collide with the parent's).
const RLQSChildPrefix = "fastlimit_rlqs_"

// RegisterRLQSProcess registers, in --rlqs-process's parent, the child's
// restarts and the child's RLQS series, read from its /metrics at url at
// each scrape.
func RegisterRLQSProcess(reg prometheus.Registerer, restarts func() float64, url string, log *zap.Logger) error {
	return register(reg, rlqsProcessRestartsDef.read(restarts),
		&Remote{URL: url, Prefix: RLQSChildPrefix, Log: log})
}
