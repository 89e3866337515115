package rls

import (
	"context"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// headerText renders headers as "Name: value" lines, in order.
func headerText(hs []*core.HeaderValue) string {
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(h.GetKey() + ": " + h.GetValue() + "\n")
	}
	return b.String()
}

// TestRequestHeaders: with RequestHeaders (LIMIT_REQUEST_HEADERS_ENABLED,
// envoyproxy/ratelimit#1168) every answer with a limit carries the limit,
// remaining and reset of the status the response headers would describe,
// for the upstream, under the request names, OK or not, whatever the
// response headers do; without it none.
func TestRequestHeaders(t *testing.T) {
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n" +
		"  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n" +
		"  - key: big\n    rate_limit: {unit: day, requests_per_unit: 100}\n")})
	if err != nil {
		t.Fatal(err)
	}
	request := func(kvs ...string) *rlspb.RateLimitRequest {
		r := &rlspb.RateLimitRequest{Domain: "d"}
		for i := 0; i+1 < len(kvs); i += 2 {
			r.Descriptors = append(r.Descriptors, &common.RateLimitDescriptor{
				Entries: []*common.RateLimitDescriptor_Entry{{Key: kvs[i], Value: kvs[i+1]}}})
		}
		return r
	}
	names := HeaderOptions{RequestLimitHeader: "X-Up-Limit", RequestRemainingHeader: "X-Up-Remaining", RequestResetHeader: "X-Up-Reset"}
	for _, tc := range []struct {
		name     string
		opts     HeaderOptions
		response string // the first header's name, "" for none
		upstream bool
	}{
		{"request headers alone", HeaderOptions{Mode: HeadersOff, RequestHeaders: true}, "", true},
		{"both, names apart", HeaderOptions{RequestHeaders: true, Mode: HeadersLegacy, LimitHeader: "RateLimit-Limit",
			RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"}, "RateLimit-Limit", true},
		{"response headers alone", HeaderOptions{Mode: HeadersIETF}, "RateLimit-Policy", false},
		{"neither", HeaderOptions{Mode: HeadersOff}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.RequestLimitHeader, o.RequestRemainingHeader, o.RequestResetHeader =
				names.RequestLimitHeader, names.RequestRemainingHeader, names.RequestResetHeader
			st := store.NewMemory(store.MemoryOptions{})
			t.Cleanup(func() { _ = st.Close() })
			l := limiter.New(st, limiter.Options{})
			l.SetRules(rs.Set)
			s := New(l, Options{Headers: o}, zaptest.NewLogger(t))
			var answers []*rlspb.RateLimitResponse
			for _, req := range []*rlspb.RateLimitRequest{
				request("k", "a", "big", "x"), request("k", "a"), request("k", "a"), request("none", "x"),
			} {
				resp, err := s.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				answers = append(answers, resp)
			}
			want := []string{
				"X-Up-Limit: 2\nX-Up-Remaining: 1\nX-Up-Reset: ", // least remaining: k's
				"X-Up-Limit: 2\nX-Up-Remaining: 0\nX-Up-Reset: ",
				"X-Up-Limit: 2\nX-Up-Remaining: 0\nX-Up-Reset: ", // OVER_LIMIT too, no Retry-After
				"", // no limit matched
			}
			for i, resp := range answers {
				got := headerText(resp.GetRequestHeadersToAdd())
				switch {
				case !tc.upstream && got != "":
					t.Errorf("answer %d: request headers %q, want none", i, got)
				case tc.upstream && (!strings.HasPrefix(got, want[i]) || strings.Count(got, "\n") != strings.Count(want[i], "\n")+min(1, len(want[i]))):
					t.Errorf("answer %d (%v): request headers\n%s\nwant\n%s...", i, resp.GetOverallCode(), got, want[i])
				}
				wantFirst := tc.response
				if i == 3 { // no limit: no headers
					wantFirst = ""
				}
				if first := resp.GetResponseHeadersToAdd(); (wantFirst == "") != (len(first) == 0) ||
					(wantFirst != "" && first[0].GetKey() != wantFirst) {
					t.Errorf("answer %d: response headers %v, want first %q", i, first, wantFirst)
				}
			}
			if answers[2].GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("the third hit of 2 an hour: %v", answers[2].GetOverallCode())
			}
		})
	}
}
