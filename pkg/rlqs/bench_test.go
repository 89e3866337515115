package rlqs_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
)

// BenchmarkReports measures periodic reports of many buckets handled by
// one replica, each op one report of `buckets` buckets from one of
// `envoys` streams sending concurrently, answered before the next. It
// reports bucket reports per second, and with Redis the Redis CPU per
// bucket report (from INFO's used_cpu_*; the server is the test's own).
func BenchmarkReports(b *testing.B) {
	for _, tc := range []struct {
		envoys, buckets int
		redis           bool
	}{
		{10, 100, false},
		{100, 1000, false},
		{10, 100, true},
		{100, 1000, true},
	} {
		name := fmt.Sprintf("envoys=%d/buckets=%d/store=memory", tc.envoys, tc.buckets)
		if tc.redis {
			name = strings.Replace(name, "memory", "redis", 1)
		}
		b.Run(name, func(b *testing.B) { benchReports(b, tc.envoys, tc.buckets, tc.redis) })
	}
}

func benchReports(b *testing.B, envoys, buckets int, useRedis bool) {
	rules := benchRules(b, buckets)
	var ds rlqs.DemandStore = demand.NewMemory(nil)
	var rdb *redis.Client
	if useRedis {
		rdb = redis.NewClient(&redis.Options{Addr: redistest.Addr(b), DB: 13, PoolSize: 64})
		b.Cleanup(func() { rdb.FlushDB(context.Background()); _ = rdb.Close() })
		ds = demand.NewRedis(rdb)
	}
	c := &cluster{t: b}
	r := c.startReplica(rlqs.Options{Rules: func() *descriptors.Set { return rules }, Replica: "bench"}, &failing{DemandStore: ds})
	b.Cleanup(func() {
		_ = r.svc.Close(context.Background())
		r.gs.Stop()
		_ = r.cc.Close()
	})
	streams := make([]rawStream, envoys)
	reports := make([]*rlqspb.RateLimitQuotaUsageReports, envoys)
	for i := range streams {
		s, err := rlqspb.NewRateLimitQuotaServiceClient(r.cc).StreamRateLimitQuotas(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		streams[i] = s
		reports[i] = benchReport(buckets)
		// Subscribe every bucket first, as one report.
		if err := s.Send(reports[i]); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			b.Fatal(err)
		}
	}
	var cpu0 time.Duration
	if rdb != nil {
		cpu0 = redistest.CPU(b, rdb.Options().Addr)
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := (b.N + envoys - 1) / envoys
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				if err := streams[i].Send(reports[i]); err != nil {
					b.Error(err)
					return
				}
				if _, err := streams[i].Recv(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	n := float64(per * envoys * buckets)
	b.ReportMetric(n/took.Seconds(), "bucket-reports/s")
	if rdb != nil {
		b.ReportMetric((redistest.CPU(b, rdb.Options().Addr)-cpu0).Seconds()/n*1e6, "redis-µs/bucket-report")
	}
}

// benchRules is one domain of n limits, name=0 ... name=n-1.
func benchRules(b *testing.B, n int) *descriptors.Set {
	ds := make([]descriptors.Descriptor, n)
	for i := range ds {
		ds[i] = descriptors.Descriptor{Key: "name", Value: strconv.Itoa(i),
			Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 1000}}
	}
	s, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: ds}})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchReport(buckets int) *rlqspb.RateLimitQuotaUsageReports {
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
	for i := range buckets {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": strconv.Itoa(i)}},
			NumRequestsAllowed: 50, NumRequestsDenied: 5, TimeElapsed: durationpb.New(5 * time.Second),
		})
	}
	return r
}
