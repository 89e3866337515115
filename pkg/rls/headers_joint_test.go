package rls

import (
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestHeadersJoint: the headers of a joint (a rule with several limits) name each limit,
// st's limit (the one that decides) first in the legacy limit header.
func TestHeadersJoint(t *testing.T) {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{{Key: "account",
		Limits: []*descriptors.Limit{
			{Unit: descriptors.Second, RequestsPerUnit: 10},
			{Name: "daily", Unit: descriptors.Day, RequestsPerUnit: 1000},
			{Name: "bucket", Algorithm: descriptors.TokenBucket, Unit: descriptors.Minute, RequestsPerUnit: 60, Burst: 5 * descriptors.Milli},
		}}}}})
	if err != nil {
		t.Fatal(err)
	}
	g := set.Limits()
	parts := []limiter.Status{
		{Limit: g[0], Remaining: 9, ResetMillis: 1000},
		{Limit: g[1], Remaining: 0, ResetMillis: 3_600_000, RetryAfterMillis: 3_600_000, Code: limiter.OverLimit},
		{Limit: g[2], Remaining: 4, ResetMillis: 1000},
	}
	st := parts[1]
	st.Parts = parts
	for _, tc := range []struct {
		o    HeaderOptions
		want map[string]string
	}{
		{HeaderOptions{ResponseHeaders: HeadersIETF}, map[string]string{
			"RateLimit-Policy": `"d.account#0";q=10;w=1, "daily";q=1000;w=86400, "bucket";q=5;w=5`,
			"RateLimit":        `"d.account#0";r=9;t=1, "daily";r=0;t=3600, "bucket";r=4;t=1`,
			"Retry-After":      "3600",
		}},
		{HeaderOptions{ResponseHeaders: HeadersLegacy, LimitHeader: "X-RateLimit-Limit", RemainingHeader: "X-RateLimit-Remaining", ResetHeader: "X-RateLimit-Reset"},
			map[string]string{
				"X-RateLimit-Limit":     "1000, 10;w=1, 1000;w=86400, 5;w=5",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "3600",
				"Retry-After":           "3600",
			}},
	} {
		got := map[string]string{}
		for _, h := range tc.o.headers(&st, true) {
			got[h.GetKey()] = h.GetValue()
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.o.ResponseHeaders, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.o.ResponseHeaders, k, got[k], v)
			}
		}
	}
}
