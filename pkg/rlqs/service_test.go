package rlqs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
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

// recvCode receives until the stream ends and returns its status code;
// it fails the test if the stream has not ended within 10 s (a stream
// the server should have ended but serves would otherwise hang the test).
func recvCode(t *testing.T, s rawStream) codes.Code {
	t.Helper()
	done := make(chan codes.Code, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				done <- status.Code(err)
				return
			}
		}
	}()
	select {
	case code := <-done:
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("the stream has not ended after 10 s")
		return codes.OK
	}
}

func TestDomainBinding(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	s := openRaw(t, c)
	_ = s.Send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, 0)}})
	if code := recvCode(t, s); code != codes.InvalidArgument {
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
	if code := recvCode(t, s); code != codes.InvalidArgument {
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
	if len(r.GetBucketAction()) != 1 || envoysim.Key(r.GetBucketAction()[0].GetBucketId().GetBucket()) != envoysim.Key(bucketA) {
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
	if code := recvCode(t, s); code != codes.Unavailable {
		t.Errorf("open stream ended with %v, want Unavailable", code)
	}
	if code := recvCode(t, openRaw(t, c)); code != codes.Unavailable {
		t.Errorf("new stream: %v, want Unavailable", code)
	}
}

// TestObserverAndUsage: the observer is told of the division, the totals
// sum it; Usage shows every client's demand and share.
func TestObserverAndUsage(t *testing.T) {
	obs := &recorder{}
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Observer = obs }})
	for _, rate := range []float64{800, 100, 100} {
		c.fleet.Send(c.envoy(0, envoysim.Config{}), bucketA, rate)
	}
	c.run(3 * c.period)
	tot := c.replicas[0].svc.Totals()["d"]
	if tot.Streams != 3 || tot.Buckets != 3 || tot.Limits != 1 || tot.LimitRate != 300 {
		t.Errorf("totals = %+v, want 3 streams and buckets, 1 limit of 300/s", tot)
	}
	if tot.AssignedRate < 299 || tot.AssignedRate > 301 {
		t.Errorf("assigned rate = %v, want 300", tot.AssignedRate)
	}
	for _, key := range []string{"reports d", "bucket_reports d", "requests allowed d", "actions d", "exchanges"} {
		if obs.get(key) == 0 {
			t.Errorf("observer: no %s", key)
		}
	}
	if n := obs.get("subscriptions d"); n != 3 {
		t.Errorf("observer: %v subscriptions, want 3", n)
	}

	u := c.replicas[0].svc.Usage("d", map[string]string{"name": "a"})
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
}

// TestUnknownDomainFolded: a domain the rules do not name is told and
// totalled as rlqs.UnknownDomain, so that Envoys cannot grow label sets.
func TestUnknownDomainFolded(t *testing.T) {
	obs := &recorder{}
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Observer = obs }})
	s := openRaw(t, c)
	if err := s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "nope", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucketA, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	tot := c.replicas[0].svc.Totals()
	if _, ok := tot["nope"]; ok || tot[rlqs.UnknownDomain].Streams != 1 {
		t.Errorf("totals = %+v, want one stream under %s", tot, rlqs.UnknownDomain)
	}
	if n := obs.get("reports " + rlqs.UnknownDomain); n != 1 || obs.get("reports nope") != 0 {
		t.Errorf("observer: %v reports under %s, want 1 (and none under nope)", n, rlqs.UnknownDomain)
	}
}

// recorder is an Observer that sums what it is told, by event and domain.
type recorder struct {
	mu sync.Mutex
	n  map[string]float64
}

var _ rlqs.Observer = (*recorder)(nil)

func (r *recorder) add(key string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]float64{}
	}
	r.n[key] += v
}

func (r *recorder) get(key string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[key]
}

func (r *recorder) Reported(d string, buckets, subscribed int) {
	r.add("reports "+d, 1)
	r.add("bucket_reports "+d, float64(buckets))
	r.add("subscriptions "+d, float64(subscribed))
}

func (r *recorder) Requests(d string, allowed, denied uint64) {
	r.add("requests allowed "+d, float64(allowed))
	r.add("requests denied "+d, float64(denied))
}

func (r *recorder) ActionsSent(d string, n int) { r.add("actions "+d, float64(n)) }
func (r *recorder) Pushed(d string)             { r.add("pushes "+d, 1) }
func (r *recorder) Abandoned(d string)          { r.add("abandoned "+d, 1) }
func (r *recorder) EmptyBucketID(d string)      { r.add("empty_ids "+d, 1) }
func (r *recorder) Unmatched(d string)          { r.add("unmatched "+d, 1) }
func (r *recorder) Silent(d string)             { r.add("silent "+d, 1) }
func (r *recorder) ReportRefused(d string)      { r.add("refused "+d, 1) }
func (r *recorder) Unidentified()               { r.add("unidentified", 1) }
func (r *recorder) BucketsRefused(d, why string, n int) {
	r.add("refused_buckets "+d+" "+why, float64(n))
}
func (r *recorder) StreamRefused()              { r.add("refused_streams", 1) }
func (r *recorder) ReportsShed(d string, n int) { r.add("shed "+d, float64(n)) }
func (r *recorder) StoreFailed()                { r.add("store_errors", 1) }
func (r *recorder) Exchanged(_ time.Duration, items int) {
	r.add("exchanges", 1)
	r.add("items", float64(items))
}

// TestTracing: a report is a span, its store exchange a child span, with
// a worker budget (reports in batches) and without (each on its stream's
// goroutine).
func TestTracing(t *testing.T) {
	for _, workers := range []int{0, -1} {
		t.Run(fmt.Sprintf("workers %d", workers), func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Tracer, o.ReportWorkers = tp.Tracer("rlqs"), workers }})
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
		})
	}
}
