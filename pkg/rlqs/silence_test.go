package rlqs_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// TestSilentEnvoy: one of two Envoys hangs, its stream open: within three
// report periods of its last report its stream is ended and the other
// Envoy holds the whole limit, on one replica and across two.
func TestSilentEnvoy(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			obs := &recorder{}
			c := newCluster(t, clusterOptions{replicas: replicas, opts: func(o *rlqs.Options) { o.Observer = obs }})
			busy, silent := c.envoy(0, envoysim.Config{}), c.envoy(replicas-1, envoysim.Config{})
			c.fleet.Send(busy, bucketA, 600)
			c.fleet.Send(silent, bucketA, 600)
			c.run(3*c.period + 20*time.Millisecond) // just after the reports at 15.01s
			c.fleet.Pause(silent)
			lastReport := 3*c.period + 10*time.Millisecond
			elapsed := 3*c.period + 20*time.Millisecond
			for busy.Held(bucketA) < 0.98*300 && elapsed < 8*c.period {
				c.run(10 * time.Millisecond)
				elapsed += 10 * time.Millisecond
			}
			took := elapsed - lastReport
			t.Logf("the busy Envoy holds %.1f/s %v after the silent one's last report", busy.Held(bucketA), took)
			if took > 3*c.period+time.Second {
				t.Errorf("the silent Envoy's share came back after %v, more than 3 periods", took)
			}
			if obs.get("silent d") != 1 {
				t.Errorf("%v silent streams counted, want 1", obs.get("silent d"))
			}
			if busy.Stats().GapDecisions != 0 || busy.Stats().Expired != 0 {
				t.Errorf("busy Envoy: %+v", busy.Stats())
			}
		})
	}
}

// TestBlackHoledReplica: a replica is lost without a reset. Its Envoys,
// with the example's keepalive (12 s, jitter, 3 s), abort their streams
// and open new ones on the other replica before their assignments expire
// (no lapse, no fallback); the limit is never passed meanwhile, and holds
// again once they moved. The black hole comes at the worst time: just
// after a ping was answered, the next report lost in it.
func TestBlackHoledReplica(t *testing.T) {
	c := newCluster(t, clusterOptions{replicas: 2})
	ka := envoysim.Config{Keepalive: envoysim.Keepalive{Interval: 12 * time.Second, Timeout: 3 * time.Second}}
	var ts []*envoysim.Traffic
	for i, rate := range []float64{800, 100, 100} {
		ts = append(ts, c.fleet.Send(c.envoy([]int{0, 1, 0}[i], ka), bucketA, rate))
	}
	c.run(13820 * time.Millisecond) // pinged at 13.81s, reports at 10.01s and 15.01s
	c.blackHole(0)
	for elapsed := time.Duration(0); elapsed < 7*c.period; elapsed += c.period {
		got := c.admitted(c.period, ts...)
		t.Logf("%v after the black hole: %.1f", elapsed, got)
		if total := sum(got); total > 330 {
			t.Errorf("%v after the black hole: admitted %.1f/s, over the limit by more than 10%%", elapsed, total)
		}
	}
	got := c.admitted(2*c.period, ts...)
	if total := sum(got); total < 270 || total > 330 {
		t.Errorf("after the move admitted %.1f = %.1f/s, want 300 ±10%%", got, total)
	}
	for _, i := range []int{0, 2} {
		if st := c.envoys[i].Stats(); st.KeepaliveAborts != 1 || st.StreamsOpened != 2 {
			t.Errorf("envoy %d: %+v, want one keepalive abort and a second stream", i, st)
		}
		if st := c.envoys[i].State(bucketA); st.Fallback || st.Strategy.GetTokenBucket() == nil {
			t.Errorf("envoy %d holds %v", i, st.Strategy)
		}
	}
	c.checkClean()
}

// TestUnmatchedCounted: every bucket that matches no rule is counted,
// and each id logged once.
func TestUnmatchedCounted(t *testing.T) {
	obs := &recorder{}
	core, logs := observer.New(zap.InfoLevel)
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Observer, o.Log = obs, zap.New(core) }})
	for range 2 {
		e := c.envoy(0, envoysim.Config{})
		c.fleet.Send(e, map[string]string{"name": "nomatch"}, 1)
		c.fleet.Send(e, map[string]string{"name": "a", "extra": "x"}, 1)
	}
	c.run(3 * c.period)
	if n := obs.get("unmatched d"); n != 4 {
		t.Errorf("%v unmatched buckets counted, want 4", n)
	}
	if n := logs.FilterMessageSnippet("matches no rule").Len(); n != 2 {
		t.Errorf("%d lines logged, want one per id (2)", n)
	}
}

// TestUnmatchedLinesBounded: an Envoy naming 500 ids that match no rule
// gets each counted, and at most maxIDLines lines a second logged (two
// seconds' worth, should the report straddle one), the first line of a
// later second saying how many went unlogged.
func TestUnmatchedLinesBounded(t *testing.T) {
	obs := &recorder{}
	core, logs := observer.New(zap.InfoLevel)
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.Observer, o.Log = obs, zap.New(core) }})
	e := c.envoy(0, envoysim.Config{})
	for i := range 500 {
		c.fleet.Send(e, map[string]string{"name": fmt.Sprintf("nomatch-%d", i)}, 1)
	}
	c.run(c.period)
	if n := obs.get("unmatched d"); n != 500 {
		t.Errorf("%v unmatched buckets counted, want 500", n)
	}
	if n := logs.FilterMessageSnippet("matches no rule").Len(); n < 1 || n > 20 {
		t.Errorf("%d lines logged for 500 new ids, want 1 to 20", n)
	}
}

// TestReportTooLarge: a report larger than MaxReportBytes, or than the
// gRPC server's receive limit, ends its stream with ResourceExhausted and
// is counted.
func TestReportTooLarge(t *testing.T) {
	set := testRules(t)
	for _, tc := range []struct {
		name   string
		opts   rlqs.Options
		server []grpc.ServerOption
	}{
		{"MaxReportBytes", rlqs.Options{MaxReportBytes: 2000}, nil},
		{"receive limit", rlqs.Options{}, []grpc.ServerOption{grpc.MaxRecvMsgSize(2000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &recorder{}
			opts := tc.opts
			opts.Rules, opts.Observer = func() *descriptors.Set { return set }, obs
			svc, err := rlqs.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			cc, _ := envoysim.InProcess(t, svc.Register, tc.server...)
			s, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			big := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
			for i := range 100 {
				big.BucketQuotaUsages = append(big.BucketQuotaUsages, usage(map[string]string{"name": "a", "tenant": strings.Repeat("x", 20) + fmt.Sprint(i)}, 1, time.Second))
			}
			_ = s.Send(big)
			if code := recvCode(t, s); code != codes.ResourceExhausted {
				t.Errorf("stream ended with %v, want ResourceExhausted", code)
			}
			if !wait.True(10*time.Second, func() bool { return obs.get("refused "+rlqs.UnknownDomain) == 1 }) {
				t.Errorf("%v refused reports counted, want 1", obs.get("refused "+rlqs.UnknownDomain))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_ = svc.Close(ctx)
		})
	}
}

// TestLargeReport: a report of 100,000 buckets (10,000 under -race), as
// an Envoy with that many sends each period, is answered in full, in responses of about a
// megabyte or less, each bucket assigned; the next report too.
func TestLargeReport(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 buckets")
	}
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{
		{Key: "name", Value: "api", Descriptors: []descriptors.Descriptor{
			{Key: "tenant", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 10}},
		}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var largest atomic.Int64
	c := newCluster(t, clusterOptions{rules: func() *descriptors.Set { return set },
		wrap: func(st rlqs.DemandStore) rlqs.DemandStore {
			return &batched{notifying: st.(notifying), largest: &largest}
		},
		server: []grpc.ServerOption{grpc.MaxRecvMsgSize(16 << 20)}})
	s := openRaw(t, c)
	n := 100_000
	if raceDetector {
		n = 10_000
	}
	report := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
	for i := range n {
		report.BucketQuotaUsages = append(report.BucketQuotaUsages,
			usage(map[string]string{"name": "api", "tenant": fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)}, 3, 5*time.Second))
	}
	for round := range 2 {
		start := time.Now()
		if err := s.Send(report); err != nil {
			t.Fatal(err)
		}
		got, responses, largest := 0, 0, 0
		for got < n {
			r, err := s.Recv()
			if err != nil {
				t.Fatalf("round %d: %v after %d actions", round, err, got)
			}
			responses++
			largest = max(largest, proto.Size(r))
			for _, a := range r.GetBucketAction() {
				if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
					t.Fatalf("bucket %v assigned %v", a.GetBucketId().GetBucket(), a)
				}
			}
			got += len(r.GetBucketAction())
		}
		t.Logf("round %d: %d actions in %d responses (largest %d bytes) in %v", round, got, responses, largest, time.Since(start))
		if largest > 1<<20+1<<16 {
			t.Errorf("a response of %d bytes", largest)
		}
	}
	if l := largest.Load(); l > 8192 {
		t.Errorf("an exchange of %d items", l)
	}
}

// batched records the largest exchange it is asked for: the service
// sends at most 8192 items in one, so that a long one does not time out.
type batched struct {
	notifying
	largest *atomic.Int64
}

type notifying interface {
	rlqs.DemandStore
	rlqs.Notifier
}

func (b *batched) Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	for l := b.largest.Load(); int64(len(items)) > l && !b.largest.CompareAndSwap(l, int64(len(items))); l = b.largest.Load() {
	}
	return b.notifying.Exchange(ctx, items, ttl, now)
}
