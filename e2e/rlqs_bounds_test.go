package e2e_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// rlqsRSSBoundKiB is docs/operations.md's bound ("Bounds") on the RSS of
// a replica whose RLQS streams hold maxBuckets buckets: the process's own,
// 12 KiB a bucket (about 8 measured), 64 KiB a stream, and 32 MiB for
// the reports being decoded.
func rlqsRSSBoundKiB(baseKiB, maxBuckets, streams int) int {
	return baseKiB + 12*maxBuckets + 64*streams + 32<<10
}

// TestRLQSBucketFlood: two streams name 1,000,000 new buckets between
// them, 10,000 a report, each bucket a limit of its own. The replica
// holds no more than --rlqs-max-buckets-per-stream each and
// --rlqs-max-buckets in all, refuses and counts the rest (every new
// bucket is held or refused), its RSS stays under the documented bound,
// and another client's RateLimitService calls keep succeeding.
func TestRLQSBucketFlood(t *testing.T) {
	const (
		perStream, perServer = 20_000, 30_000
		streams, reports     = 2, 50
		perReport            = 10_000
		named                = streams * reports * perReport
	)
	fs := quotaReplicas(t, 1, envoyPeriod, "--rlqs-max-buckets-per-stream", fmt.Sprint(perStream),
		"--rlqs-max-buckets", fmt.Sprint(perServer))
	f := fs[0]
	pid := f.cmd.Process.Pid
	if _, err := f.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), domainRequest("d", "b", "name")); err != nil {
		t.Fatal(err)
	}
	base := rssKiB(t, pid)
	bound := rlqsRSSBoundKiB(base, perServer, streams)

	var calls, failed atomic.Int64
	var firstErr atomic.Value
	stopRLS := loop(4, time.Millisecond, func(int, int) {
		calls.Add(1)
		if _, err := f.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), domainRequest("d", "b", "name")); err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
		}
	})
	defer stopRLS()

	cc, err := grpc.NewClient(f.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	var peak atomic.Int64
	peak.Store(int64(base))
	sample := func() { peak.Store(max(peak.Load(), int64(rssKiB(t, pid)))) }
	var held atomic.Int64 // the most buckets seen held
	checkHeld := func() {
		page := metricsPage(t, f.Admin)
		held.Store(max(held.Load(), int64(scrape.Value(t, page, `fastlimit_rlqs_buckets{domain="d"}`))))
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := range streams {
		wg.Go(func() {
			stream, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
			if err != nil {
				errs <- err
				return
			}
			go func() { // the answers, drained
				for {
					if _, err := stream.Recv(); err != nil {
						return
					}
				}
			}()
			for r := range reports {
				m := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
				for i := range perReport {
					n := (s*reports+r)*perReport + i
					m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
						BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": "big", "tenant": fmt.Sprintf("%08x-1111-4222-8333-%012x", n, n)}},
						NumRequestsAllowed: 1, TimeElapsed: durationpb.New(envoyPeriod)})
				}
				if err := stream.Send(m); err != nil {
					errs <- fmt.Errorf("stream %d report %d: %w", s, r, err)
					return
				}
				if r%5 == 0 {
					sample()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	counted := func() float64 {
		page := metricsPage(t, f.Admin)
		return scrape.Value(t, page, `fastlimit_rlqs_bucket_reports_total{domain="d"}`) +
			scrape.Value(t, page, `fastlimit_rlqs_refused_buckets_total{domain="d",reason="stream"}`) +
			scrape.Value(t, page, `fastlimit_rlqs_refused_buckets_total{domain="d",reason="server"}`)
	}
	// Every bucket named is reported held or counted refused, once the
	// replica has handled the last report.
	wait.True(60*time.Second, func() bool {
		sample()
		checkHeld()
		return counted() >= named
	})
	sample()
	checkHeld()
	stopRLS()
	page := metricsPage(t, f.Admin)
	subscribed := scrape.Value(t, page, `fastlimit_rlqs_subscriptions_total{domain="d"}`)
	refused := scrape.Value(t, page, `fastlimit_rlqs_refused_buckets_total{domain="d",reason="stream"}`) +
		scrape.Value(t, page, `fastlimit_rlqs_refused_buckets_total{domain="d",reason="server"}`)
	t.Logf("%d buckets named in %v: %v held, %v refused, at most %d held at once; RSS %d -> peak %d KiB (bound %d); %d RLS calls, %d failed",
		named, time.Since(start).Round(time.Millisecond), subscribed, refused, held.Load(), base, peak.Load(), bound, calls.Load(), failed.Load())
	if subscribed+refused != named {
		t.Errorf("%v held + %v refused of %d buckets named", subscribed, refused, named)
	}
	// Buckets no report names for 3 periods are dropped, making room:
	// over the run, at most perServer for each such span and one more
	// can have been held.
	took := time.Since(start)
	spans := max(3, int(took/(3*envoyPeriod))+1)
	if refused < float64(named-spans*perServer) {
		t.Errorf("%v refused of %d past a bound of %d over %v (%d spans of 3 periods)", refused, named, perServer, took, spans)
	}
	if held.Load() > perServer {
		t.Errorf("%d buckets held, more than --rlqs-max-buckets %d", held.Load(), perServer)
	}
	if int(peak.Load()) > bound {
		t.Errorf("RSS peaked at %d KiB from %d, over the documented bound of %d", peak.Load(), base, bound)
	}
	if failed.Load() != 0 || calls.Load() == 0 {
		t.Errorf("%d of %d RateLimitService calls failed during the flood, the first: %v", failed.Load(), calls.Load(), firstErr.Load())
	}
}

// TestRLQSStoreFlapsLogged: Redis answers demand exchanges too late (past
// the exchange's 1 s timeout) in every other 600 ms while 8 streams report every
// 20 ms, so that the demand store fails and answers again many times a
// second: the replica says so at most once per 10 s, each line after the
// first counting the changes since the line before.
func TestRLQSStoreFlapsLogged(t *testing.T) {
	const run, every = 14 * time.Second, 10 * time.Second
	r := redistest.StartServer(t)
	p := faultproxy.New(t, r.Addr)
	fs := quotaReplicasOn(t, []string{"--redis-url", "redis://" + p.Addr()}, 1, envoyPeriod)
	f := fs[0]
	// Replies are held in every other 600 ms of the wall clock, whatever
	// number of commands an exchange sends or exchanges a call carries.
	p.Add(&faultproxy.HoldReplies{Delay: 1500 * time.Millisecond, Match: faultproxy.Match{Commands: []string{"EVALSHA"},
		Func: func(*faultproxy.Command) bool { return time.Now().UnixMilli()/600%2 == 0 }}})
	cc, err := grpc.NewClient(f.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	report := &rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqspb.BucketId{Bucket: rlqsBucket}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(time.Second)}}}
	var wg sync.WaitGroup
	deadline := time.Now().Add(run)
	for range 8 {
		wg.Go(func() {
			stream, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
			if err != nil {
				return
			}
			go func() {
				for {
					if _, err := stream.Recv(); err != nil {
						return
					}
				}
			}()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for now := time.Now(); now.Before(deadline); now = <-tick.C {
				if stream.Send(report) != nil {
					return
				}
			}
			_ = stream.CloseSend()
		})
	}
	wg.Wait()
	failures := scrape.Value(t, metricsPage(t, f.Admin), "fastlimit_rlqs_store_errors_total")
	logs := f.logs.String()
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "demand store exchanges fail") || strings.Contains(l, "demand store exchanges succeed again") {
			lines = append(lines, l)
		}
	}
	t.Logf("%v exchanges failed in %v; %d lines:\n%s", failures, run, len(lines), strings.Join(lines, "\n"))
	if failures < 20 {
		t.Fatalf("%v exchanges failed: the store did not flap", failures)
	}
	if most := int(run/every) + 1; len(lines) == 0 || len(lines) > most {
		t.Errorf("%d lines of the store's state in %v, want 1 to %d", len(lines), run, most)
	}
	changes := regexp.MustCompile(`"changes": (\d+)`)
	counted := 0
	for _, l := range lines {
		m := changes.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line without a count of changes: %s", l)
		}
		c, _ := strconv.Atoi(m[1])
		counted = max(counted, c)
	}
	if len(lines) > 1 && counted < 2 {
		t.Errorf("no line counts more than one change: %v", lines)
	}
}
