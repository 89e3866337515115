package rlqs

import (
	"fmt"
	"testing"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// TestInboxMergeBound: a waiting report merges reports of the buckets it
// names, and new buckets up to mergeMax, but not a report that would
// take it past mergeMax (a stream naming new buckets report after
// report): its reader waits instead, so that what waits stays one
// report's worth.
func TestInboxMergeBound(t *testing.T) {
	report := func(from, n int) *rlqspb.RateLimitQuotaUsageReports {
		r := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
		for i := range n {
			r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"name": fmt.Sprint(from + i)}}, NumRequestsAllowed: 1})
		}
		return r
	}
	for _, tc := range []struct {
		name         string
		first, next  *rlqspb.RateLimitQuotaUsageReports
		merged       bool
		named, count int // after: buckets pending names, the first bucket's allowed
	}{
		{"same buckets", report(0, 3000), report(0, 3000), true, 3000, 2},
		{"new buckets past the first", report(0, 3000), report(3000, 10), false, 3000, 1},
		{"subscriptions into a small report", report(0, 3), report(3, 1), true, 4, 1},
		{"past mergeMin", report(0, 3), report(3, mergeMin), false, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := inbox{pending: tc.first, first: len(tc.first.BucketQuotaUsages)}
			if got := in.merge(tc.next); got != tc.merged {
				t.Errorf("merged %v, want %v", got, tc.merged)
			}
			if n := len(in.pending.BucketQuotaUsages); n != tc.named {
				t.Errorf("pending names %d buckets, want %d", n, tc.named)
			}
			if a := in.pending.BucketQuotaUsages[0].NumRequestsAllowed; a != uint64(tc.count) {
				t.Errorf("first bucket allowed %d, want %d", a, tc.count)
			}
		})
	}
}
