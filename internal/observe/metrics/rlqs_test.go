package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

// TestRLQS: the quota service's series lint clean; the gauges are the
// totals read at scrape time, by domain, and the counters what the
// observer was told.
func TestRLQS(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	totals := map[string]RLQSTotals{"d": {Streams: 3, Buckets: 3, Limits: 1, LimitRate: 300, AssignedRate: 300, DemandRate: 1000}}
	m, err := NewRLQS(reg, func() map[string]RLQSTotals { return totals })
	if err != nil {
		t.Fatal(err)
	}
	m.Reported("d", 2, 1)
	m.Requests("d", 7, 3)
	m.Exchanged(time.Millisecond, 4)
	m.Unmatched("d")
	m.ReportRefused("d")
	scrape.Linted(t, reg)
	want := `
# HELP fastlimit_rlqs_limit_rate Sum of the global rates (requests per second) of the limits divided on this replica.
# TYPE fastlimit_rlqs_limit_rate gauge
fastlimit_rlqs_limit_rate{domain="d"} 300
# HELP fastlimit_rlqs_streams Envoy streams open on this replica.
# TYPE fastlimit_rlqs_streams gauge
fastlimit_rlqs_streams{domain="d"} 3
# HELP fastlimit_rlqs_demand_rate Sum of the measured demand (requests per second) of this replica's Envoys.
# TYPE fastlimit_rlqs_demand_rate gauge
fastlimit_rlqs_demand_rate{domain="d"} 1000
# HELP fastlimit_rlqs_requests_total Requests Envoys reported, by their local decision.
# TYPE fastlimit_rlqs_requests_total counter
fastlimit_rlqs_requests_total{decision="allowed",domain="d"} 7
fastlimit_rlqs_requests_total{decision="denied",domain="d"} 3
# HELP fastlimit_rlqs_bucket_reports_total Bucket usages received (a report carries one per bucket).
# TYPE fastlimit_rlqs_bucket_reports_total counter
fastlimit_rlqs_bucket_reports_total{domain="d"} 2
# HELP fastlimit_rlqs_store_exchange_items_total Bucket items written, deleted or read in demand store exchanges.
# TYPE fastlimit_rlqs_store_exchange_items_total counter
fastlimit_rlqs_store_exchange_items_total 4
# HELP fastlimit_rlqs_unmatched_buckets_total Buckets subscribed that match no rule, assigned --rlqs-unmatched (each id is logged once, at most 10 ids a second).
# TYPE fastlimit_rlqs_unmatched_buckets_total counter
fastlimit_rlqs_unmatched_buckets_total{domain="d"} 1
# HELP fastlimit_rlqs_refused_reports_total Usage reports refused for being larger than --rlqs-max-report-bytes; their stream ends.
# TYPE fastlimit_rlqs_refused_reports_total counter
fastlimit_rlqs_refused_reports_total{domain="d"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fastlimit_rlqs_streams", "fastlimit_rlqs_limit_rate",
		"fastlimit_rlqs_demand_rate", "fastlimit_rlqs_requests_total", "fastlimit_rlqs_bucket_reports_total",
		"fastlimit_rlqs_store_exchange_items_total", "fastlimit_rlqs_unmatched_buckets_total", "fastlimit_rlqs_refused_reports_total"); err != nil {
		t.Error(err)
	}
	totals = nil
	if n := testutil.CollectAndCount(reg, "fastlimit_rlqs_streams"); n != 0 {
		t.Errorf("%d stream series without domains, want 0", n)
	}
}
