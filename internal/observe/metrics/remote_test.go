package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

// TestRLQSProcess: the parent's registry serves the child's RLQS series
// (counters with labels, gauges and a histogram) as the child exports
// them, beside its own, and none of the child's others; a child that
// does not answer leaves the parent's scrape whole.
func TestRLQSProcess(t *testing.T) {
	child := prometheus.NewRegistry()
	q, err := NewRLQS(child, func() map[string]RLQSTotals { return map[string]RLQSTotals{"d": {Streams: 2, Buckets: 3}} })
	if err != nil {
		t.Fatal(err)
	}
	q.Reported("d", 4, 1)
	q.ReportsShed("d", 2)
	q.Exchanged(3*time.Millisecond, 5)
	if err := child.Register(collectors.NewGoCollector()); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool // a child starting again
	serve := promhttp.HandlerFor(child, promhttp.HandlerOpts{EnableOpenMetrics: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.NotFound(w, r)
			return
		}
		serve.ServeHTTP(w, r)
	}))
	defer srv.Close()

	parent := prometheus.NewRegistry()
	if err := parent.Register(collectors.NewGoCollector()); err != nil {
		t.Fatal(err)
	}
	if err := RegisterRLQSProcess(parent, func() float64 { return 1 }, srv.URL+"/metrics", nil); err != nil {
		t.Fatal(err)
	}
	mfs := scrape.Linted(t, parent) // duplicates (the child's go_ series) would fail the gather
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"fastlimit_rlqs_reports_total", "fastlimit_rlqs_shed_reports_total", "fastlimit_rlqs_streams",
		"fastlimit_rlqs_store_exchange_seconds", "fastlimit_rlqs_process_restarts_total", "go_goroutines"} {
		if !names[want] {
			t.Errorf("%s not served; served %v", want, names)
		}
	}
	want := `
# HELP fastlimit_rlqs_shed_reports_total Usage reports merged into the one their stream had waiting for a worker (--rlqs-report-workers): report work shed.
# TYPE fastlimit_rlqs_shed_reports_total counter
fastlimit_rlqs_shed_reports_total{domain="d"} 2
# HELP fastlimit_rlqs_streams ` + rlqsStreamsDef.help + `
# TYPE fastlimit_rlqs_streams gauge
fastlimit_rlqs_streams{domain="d"} 2
`
	if err := testutil.GatherAndCompare(parent, strings.NewReader(want), "fastlimit_rlqs_shed_reports_total", "fastlimit_rlqs_streams"); err != nil {
		t.Error(err)
	}
	// The same histogram on both sides.
	got, err := testutil.GatherAndCount(parent, "fastlimit_rlqs_store_exchange_seconds")
	if err != nil || got != 1 {
		t.Errorf("exchange histogram: %d series, %v", got, err)
	}

	down.Store(true)
	mfs = scrape.Linted(t, parent)
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, RLQSChildPrefix) && n != rlqsProcessRestartsDef.name {
			t.Errorf("%s served while the child does not answer", n)
		}
	}
}
