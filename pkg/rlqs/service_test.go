package rlqs_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

type rawStream = rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient

func openRaw(t *testing.T, c *cluster) rawStream {
	t.Helper()
	s, err := rlqspb.NewRateLimitQuotaServiceClient(c.replicas[0].cc).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func usage(id map[string]string, allowed uint64, elapsed time.Duration) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: allowed, TimeElapsed: durationpb.New(elapsed),
	}
}

// recvCode receives until the stream ends and returns its status code.
func recvCode(s rawStream) codes.Code {
	for {
		if _, err := s.Recv(); err != nil {
			return status.Code(err)
		}
	}
}

func TestDomainBinding(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	s := openRaw(t, c)
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, 0)}})
	if code := recvCode(s); code != codes.InvalidArgument {
		t.Errorf("report without domain: %v, want InvalidArgument", code)
	}
	s = openRaw(t, c)
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, 0)}})
	if r, err := s.Recv(); err != nil || len(r.GetBucketAction()) != 1 {
		t.Fatalf("subscription answer = %v, %v", r, err)
	}
	// Later reports may leave the domain out, but not change it.
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, time.Second)}})
	if r, err := s.Recv(); err != nil || len(r.GetBucketAction()) != 1 {
		t.Fatalf("answer = %v, %v", r, err)
	}
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "other", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, 0)}})
	if code := recvCode(s); code != codes.InvalidArgument {
		t.Errorf("report of another domain: %v, want InvalidArgument", code)
	}
}

// TestNothingToAnswer: a report without buckets, or whose only bucket id
// is empty, gets no response (a response must carry an action, and an
// action an id); the next report is answered.
func TestNothingToAnswer(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	s := openRaw(t, c)
	got := make(chan *rlqspb.RateLimitQuotaResponse, 4)
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- r
		}
	}()
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d"})
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil, 3, 0)}})
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, 0)}})
	r := <-got
	if len(r.GetBucketAction()) != 1 || envoysim.Key(r.GetBucketAction()[0].GetBucketId().GetBucket()) != "name=a" {
		t.Fatalf("first response = %v, want the action for name=a", r)
	}
}

// TestClose: Close ends every stream with Unavailable, so that Envoy
// reopens it elsewhere, and refuses new ones.
func TestClose(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	s := openRaw(t, c)
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, 0)}})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.replicas[0].svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if code := recvCode(s); code != codes.Unavailable {
		t.Errorf("open stream ended with %v, want Unavailable", code)
	}
	if code := recvCode(openRaw(t, c)); code != codes.Unavailable {
		t.Errorf("new stream: %v, want Unavailable", code)
	}
}

// TestMetricsAndUsage: the metrics lint clean and describe the division;
// the inspection handler shows every client's demand and share.
func TestMetricsAndUsage(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Registerer = reg }})
	for _, rate := range []float64{800, 100, 100} {
		c.fleet.Send(c.envoy(0, envoysim.Config{}), bucketA, rate)
	}
	c.run(3 * c.period)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP fastlimit_rlqs_limit_rate Sum of the global rates (requests per second) of the limits divided on this replica.
# TYPE fastlimit_rlqs_limit_rate gauge
fastlimit_rlqs_limit_rate{domain="d"} 300
# HELP fastlimit_rlqs_streams Envoy streams open on this replica.
# TYPE fastlimit_rlqs_streams gauge
fastlimit_rlqs_streams{domain="d"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fastlimit_rlqs_streams", "fastlimit_rlqs_limit_rate"); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(gaugeOf(t, reg, "fastlimit_rlqs_assigned_rate")); n < 299 || n > 301 {
		t.Errorf("assigned rate = %v, want 300", n)
	}

	rec := httptest.NewRecorder()
	c.replicas[0].svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?domain=d&bucket=name=a", nil))
	var u rlqs.Usage
	if err := json.Unmarshal(rec.Body.Bytes(), &u); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("usage: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if u.Rule != "d.name_a" || u.Assignment != "token_bucket" || u.LimitRate != 300 || len(u.Clients) != 3 {
		t.Fatalf("usage = %+v", u)
	}
	total := 0.0
	for _, cl := range u.Clients {
		if !cl.Local || cl.AssignedRate == nil || cl.DemandRate == nil {
			t.Fatalf("client %+v", cl)
		}
		total += *cl.AssignedRate
	}
	if total < 299 || total > 301 {
		t.Errorf("assigned in all %v, want 300", total)
	}
	rec = httptest.NewRecorder()
	c.replicas[0].svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?domain=d", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("without bucket: %d", rec.Code)
	}
}

// gaugeOf returns a collector of the one series of a gathered family.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "copy"})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no single series %s", name)
	return nil
}

// TestTracing: a report is a span, its store exchange a child span.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Tracer = tp.Tracer("rlqs") }})
	c.fleet.Send(c.envoy(0, envoysim.Config{}), bucketA, 10)
	c.run(c.period + time.Second)
	spans := rec.Ended()
	names := map[string]int{}
	for _, s := range spans {
		names[s.Name()]++
		if s.Name() == "rlqs.exchange" && s.Parent().SpanID() == (trace.SpanID{}) {
			t.Error("exchange span without a parent")
		}
	}
	if names["rlqs.report"] != 2 || names["rlqs.exchange"] != 2 {
		t.Errorf("spans = %v, want a report and an exchange for the subscription and the first report", names)
	}
}
