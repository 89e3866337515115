package rls

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// headersReference is headers as first written, with fmt and one
// allocation per value: the answer the one-buffer version must give.
func headersReference(o *HeaderOptions, st *limiter.Status, over bool) []*core.HeaderValue {
	var hs []*core.HeaderValue
	add := func(k, v string) { hs = append(hs, &core.HeaderValue{Key: k, Value: v}) }
	lim := st.Limit
	ms := st.ResetMillis
	if st.Code == limiter.OverLimit && st.RetryAfterMillis > 0 { // over: when the request would pass
		ms = st.RetryAfterMillis
	}
	reset := strconv.FormatInt(ceilSeconds(ms), 10)
	if o.Mode == HeadersLegacy {
		add(o.LimitHeader, strconv.FormatUint(uint64(lim.RequestsPerUnit), 10))
		add(o.RemainingHeader, strconv.FormatUint(uint64(st.Remaining), 10))
		add(o.ResetHeader, reset)
	} else {
		var b strings.Builder
		b.WriteByte('"')
		for _, c := range []byte(policyName(lim)) {
			switch {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c >= 0x20 && c < 0x7f:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
		name := b.String()
		quota, window := policy(lim)
		add("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, quota, window))
		add("RateLimit", fmt.Sprintf("%s;r=%d;t=%s", name, st.Remaining, reset))
	}
	if over {
		add("Retry-After", strconv.FormatInt(max(ceilSeconds(st.RetryAfterMillis), 1), 10))
	}
	return hs
}

func TestHeaders(t *testing.T) {
	limit := func(l descriptors.Limit) *descriptors.Limit {
		t.Helper()
		set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{{Key: "k", Limit: &l}}}})
		if err != nil {
			t.Fatal(err)
		}
		return set.Limits()[0]
	}
	window := limit(descriptors.Limit{Name: "per_ip", Unit: descriptors.Minute, RequestsPerUnit: 600, UnitMultiplier: 15})
	unnamed := limit(descriptors.Limit{Unit: descriptors.Day, RequestsPerUnit: 4_000_000_000})
	bucket := limit(descriptors.Limit{Name: `a "quoted"\ name é` + "\x7f\x01", Algorithm: descriptors.TokenBucket,
		Unit: descriptors.Second, RequestsPerUnit: 3, Burst: 10 * descriptors.Milli})
	long := limit(descriptors.Limit{Name: strings.Repeat("long-name.", 30), Unit: descriptors.Hour, RequestsPerUnit: 1})
	statuses := []limiter.Status{
		{Limit: window, Remaining: 599, ResetMillis: 899_001},
		{Code: limiter.OverLimit, Limit: window, ResetMillis: 1, RetryAfterMillis: 0},
		{Code: limiter.OverLimit, Limit: unnamed, Remaining: 0, ResetMillis: 86_400_000, RetryAfterMillis: 3_600_500},
		{Limit: bucket, Remaining: 7, ResetMillis: 999},
		{Code: limiter.OverLimit, Limit: long, Remaining: 1<<32 - 1, ResetMillis: 0, RetryAfterMillis: 1},
	}
	for _, o := range []HeaderOptions{
		{Mode: HeadersIETF},
		{Mode: HeadersLegacy, LimitHeader: "RateLimit-Limit", RemainingHeader: "X-Left", ResetHeader: "RateLimit-Reset"},
	} {
		for i := range statuses {
			st := &statuses[i]
			for _, over := range []bool{false, true} {
				got, want := o.headers(st, over), headersReference(&o, st, over)
				if len(got) != len(want) {
					t.Fatalf("%s, status %d, over %v: %d headers, want %d", o.Mode, i, over, len(got), len(want))
				}
				for j := range got {
					if !proto.Equal(got[j], want[j]) {
						t.Errorf("%s, status %d, over %v: header %d = %v, want %v", o.Mode, i, over, j, got[j], want[j])
					}
				}
			}
		}
	}
}

// TestReferenceChoice: legacy headers describe the status
// envoyproxy/ratelimit's do (its service's minimumDescriptor): the last
// over its limit outside quota mode, else the first with the least
// remaining; unlimited and unmatched ones never.
func TestReferenceChoice(t *testing.T) {
	hour := &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 10}
	day := &descriptors.Limit{Unit: descriptors.Day, RequestsPerUnit: 10}
	free := &descriptors.Limit{Unlimited: true}
	ok := func(l *descriptors.Limit, rem uint32) limiter.Status { return limiter.Status{Limit: l, Remaining: rem} }
	over := func(l *descriptors.Limit, quota bool) limiter.Status {
		return limiter.Status{Code: limiter.OverLimit, Limit: l, Quota: quota}
	}
	for _, tc := range []struct {
		name string
		sts  []limiter.Status
		want int // index, -1 for none
	}{
		{"least remaining", []limiter.Status{ok(hour, 5), ok(day, 3), ok(hour, 4)}, 1},
		{"a tie: the first", []limiter.Status{ok(hour, 3), ok(day, 3)}, 0},
		{"over: the last", []limiter.Status{over(day, false), ok(hour, 0), over(hour, false), ok(day, 0)}, 2},
		{"quota over is only least remaining", []limiter.Status{ok(day, 0), over(hour, true)}, 0},
		{"quota over first", []limiter.Status{over(hour, true), ok(day, 0), over(day, true)}, 0},
		{"unlimited and unmatched never", []limiter.Status{{Limit: free}, {}, ok(day, 7)}, 2},
		{"none", []limiter.Status{{Limit: free}, {}}, -1},
	} {
		got := referenceChoice(tc.sts)
		want := (*limiter.Status)(nil)
		if tc.want >= 0 {
			want = &tc.sts[tc.want]
		}
		if got != want {
			t.Errorf("%s: chose %+v, want %+v", tc.name, got, want)
		}
	}
}
