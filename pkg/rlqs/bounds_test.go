package rlqs_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// answers reads a raw stream's actions into a channel of bucket names.
func answers(s rawStream) <-chan string {
	out := make(chan string, 64)
	go func() {
		defer close(out)
		for r, err := s.Recv(); err == nil; r, err = s.Recv() {
			for _, a := range r.GetBucketAction() {
				out <- a.GetBucketId().GetBucket()["name"]
			}
		}
	}()
	return out
}

// expect receives n answers and checks they name want, in any order.
func expect(t *testing.T, got <-chan string, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	for range want {
		select {
		case name := <-got:
			seen[name] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("answers %v, want %v", seen, want)
		}
	}
	for _, w := range want {
		if !seen[w] {
			t.Fatalf("answers %v, want %v", seen, want)
		}
	}
}

func named(names ...string) *rlqspb.RateLimitQuotaUsageReports {
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
	for _, n := range names {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, usage(map[string]string{"name": n}, 1, 0))
	}
	return r
}

// TestBounds: new buckets past the stream's or the server's bound, or
// whose id passes the id limits, are refused (answered nothing) and
// counted, while known ones are answered; a stream past the streams'
// bound is refused; a stream's end frees its room.
func TestBounds(t *testing.T) {
	obs := &recorder{}
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) {
		o.Observer = obs
		o.MaxBucketsPerStream, o.MaxBuckets, o.MaxStreams = 3, 5, 2
		o.IDLimits = &limiter.Limits{MaxEntries: 2, MaxEntryBytes: 16}
	}})
	svc := c.replicas[0].svc
	s1 := openRaw(t, c)
	a1 := answers(s1)
	r := named("x0", "x1", "x2", "x3", "x4", "x5")
	r.BucketQuotaUsages = append(r.BucketQuotaUsages,
		usage(map[string]string{"name": "x6", "a": "1", "b": "2"}, 1, 0),
		usage(map[string]string{"name": strings.Repeat("y", 17)}, 1, 0))
	if err := s1.Send(r); err != nil {
		t.Fatal(err)
	}
	expect(t, a1, "x0", "x1", "x2")
	if err := s1.Send(named("x0", "x7")); err != nil {
		t.Fatal(err)
	}
	expect(t, a1, "x0")

	s2 := openRaw(t, c)
	a2 := answers(s2)
	if err := s2.Send(named("y0", "y1", "y2", "y3")); err != nil {
		t.Fatal(err)
	}
	expect(t, a2, "y0", "y1")

	s3 := openRaw(t, c)
	_ = s3.Send(named("z0"))
	if code := recvCode(t, s3); code != codes.ResourceExhausted {
		t.Errorf("a third stream: %v, want ResourceExhausted", code)
	}
	want := map[string]float64{
		"refused_buckets d " + rlqs.RefusedStream: 4, "refused_buckets d " + rlqs.RefusedID: 2,
		"refused_buckets d " + rlqs.RefusedServer: 2, "refused_streams": 1,
	}
	for key, n := range want {
		if got := obs.get(key); got != n {
			t.Errorf("%s = %v, want %v", key, got, n)
		}
	}

	// s1's end frees its 3 buckets: y2 is held now, y3 still refused
	// by s2's own bound.
	_ = s1.CloseSend()
	wait.For(t, 10*time.Second, func() bool { return svc.Totals()["d"].Streams == 1 })
	if err := s2.Send(named("y2", "y3", "y4")); err != nil {
		t.Fatal(err)
	}
	expect(t, a2, "y2")
	if got := obs.get("refused_buckets d " + rlqs.RefusedStream); got != 6 {
		t.Errorf("refused for the stream's bound %v, want 6", got)
	}
	if tot := svc.Totals()["d"]; tot.Buckets != 3 {
		t.Errorf("buckets held %d, want 3", tot.Buckets)
	}
}

// TestBoundsDefault: without Options' bounds, a stream holds many
// buckets (DefaultMaxBucketsPerStream).
func TestBoundsDefault(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	s := openRaw(t, c)
	a := answers(s)
	names := make([]string, 1000)
	for i := range names {
		names[i] = "n" + strconv.Itoa(i)
	}
	if err := s.Send(named(names...)); err != nil {
		t.Fatal(err)
	}
	expect(t, a, names...)
}

// gated is a demand store whose exchanges wait while it is shut.
type gated struct {
	notifying
	mu      sync.Mutex
	shut    chan struct{} // nil: open
	waiting int           // exchanges waiting for it to open
}

func (g *gated) waiters() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *gated) Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	g.mu.Lock()
	shut := g.shut
	if shut != nil {
		g.waiting++
	}
	g.mu.Unlock()
	if shut != nil {
		defer func() {
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
		}()
		select {
		case <-shut:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.notifying.Exchange(ctx, items, ttl, now)
}

func (g *gated) close() {
	g.mu.Lock()
	g.shut = make(chan struct{})
	g.mu.Unlock()
}

func (g *gated) open() {
	g.mu.Lock()
	close(g.shut)
	g.shut = nil
	g.mu.Unlock()
}

// heldObserver is a recorder whose Reported, called while a report is
// worked on (its worker slot held), waits while the observer is shut.
type heldObserver struct {
	*recorder
	in   chan struct{} // a Reported call is waiting
	shut chan struct{} // closed: open
}

func (o *heldObserver) Reported(d string, buckets, subscribed int) {
	select {
	case <-o.shut:
	default:
		o.in <- struct{}{}
		<-o.shut
	}
	o.recorder.Reported(d, buckets, subscribed)
}

// TestReportWorkers: with one worker, a stream's reports wait while
// another's is worked on, and those it sends meanwhile are merged into the
// one waiting (counted shed): it is handled once, with their counts added.
func TestReportWorkers(t *testing.T) {
	obs := &heldObserver{recorder: &recorder{}, in: make(chan struct{}, 1), shut: make(chan struct{})}
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.ReportWorkers, o.Observer = 1, obs }})
	a, b := openRaw(t, c), openRaw(t, c)
	aa, ba := answers(a), answers(b)
	if err := a.Send(named("a")); err != nil {
		t.Fatal(err)
	}
	select { // a's report holds the only worker
	case <-obs.in:
	case <-time.After(10 * time.Second):
		t.Fatal("a's report was not worked on")
	}
	for range 3 {
		r := named("b")
		r.BucketQuotaUsages[0].NumRequestsAllowed = 10
		if err := b.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, func() bool { return obs.get("shed d") == 2 })
	select {
	case <-obs.in:
		t.Fatal("b's report was worked on while a's held the only worker")
	default:
	}
	close(obs.shut)
	expect(t, aa, "a")
	expect(t, ba, "b")
	wait.For(t, 10*time.Second, func() bool { return obs.get("reports d") == 2 })
	if n := obs.get("requests allowed d"); n != 1+30 {
		t.Errorf("%v requests allowed counted, want 31 (b's three reports merged)", n)
	}
	select {
	case name := <-ba:
		t.Errorf("a second answer to b's merged reports: %s", name)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestReportWorkersStoreWait: a report waiting on the demand store gives
// its worker up meanwhile, so that another stream's report is worked on,
// not merged into a wait for the store; both are answered once it
// answers.
func TestReportWorkersStoreWait(t *testing.T) {
	obs := &recorder{}
	var g *gated
	c := newCluster(t, clusterOptions{
		wrap: func(st rlqs.DemandStore) rlqs.DemandStore { g = &gated{notifying: st.(notifying)}; return g },
		// The store's wait is not cut short by the exchange's timeout.
		opts: func(o *rlqs.Options) { o.ReportWorkers, o.Observer, o.StoreTimeout = 1, obs, time.Minute }})
	a, b := openRaw(t, c), openRaw(t, c)
	aa, ba := answers(a), answers(b)
	if err := a.Send(named("a")); err != nil {
		t.Fatal(err)
	}
	expect(t, aa, "a")
	g.close()
	if err := a.Send(named("a", "a2")); err != nil { // a new bucket: its handling waits in the store
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() bool { return g.waiters() == 1 })
	if err := b.Send(named("b")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() bool { return obs.get("reports d") == 3 })
	if n := obs.get("shed d"); n != 0 {
		t.Errorf("%v reports shed while the only worker's report waited on the store, want 0", n)
	}
	g.open()
	expect(t, aa, "a", "a2")
	expect(t, ba, "b")
}
