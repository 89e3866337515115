package rls

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestDurationUntilResetWholeSeconds: duration_until_reset carries whole
// seconds rounded up, as the reference's CalculateReset, so that Envoy's
// x-ratelimit-reset (the Duration's seconds) never reads 0 while a window
// is running.
func TestDurationUntilResetWholeSeconds(t *testing.T) {
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 5}
	for _, tc := range []struct{ ms, want int64 }{
		{1, 1}, {745, 1}, {999, 1}, {1000, 1}, {1001, 2}, {15_000, 15}, {16_745, 17}, {59_001, 60}, {60_000, 60},
		{7 * 86_400_000, 7 * 86_400},
	} {
		out := toResponse(&limiter.Response{Statuses: []limiter.Status{{Limit: lim, Remaining: 4, ResetMillis: tc.ms}}})
		d := out.Statuses[0].GetDurationUntilReset()
		if d.GetSeconds() != tc.want || d.GetNanos() != 0 {
			t.Errorf("reset %dms: duration_until_reset %ds %dns, want %ds", tc.ms, d.GetSeconds(), d.GetNanos(), tc.want)
		}
	}
}

// TestRetryAfterOnlyWhenEnforced: Retry-After comes with an OVER_LIMIT that
// Envoy enforces, never with an answer that global shadow or quota mode
// turned OK; the rate-limit headers stay.
func TestRetryAfterOnlyWhenEnforced(t *testing.T) {
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		shadow, quota  bool
		wantCode       rlspb.RateLimitResponse_Code
		wantRetryAfter bool
	}{
		{"enforced", false, false, rlspb.RateLimitResponse_OVER_LIMIT, true},
		{"global shadow mode", true, false, rlspb.RateLimitResponse_OK, false},
		// One descriptor over beside one that passes (no rule): OK.
		{"global quota mode", false, true, rlspb.RateLimitResponse_OK, false},
		// Every quota descriptor over: enforced.
		{"global quota mode, all over", false, true, rlspb.RateLimitResponse_OVER_LIMIT, true},
	} {
		for _, mode := range []string{HeadersIETF, HeadersLegacy} {
			t.Run(tc.name+" "+mode, func(t *testing.T) {
				// A stopped clock: both hits fall in one window.
				at := time.Unix(1_800_000_000, 250_000_000)
				st := store.NewMemory(store.MemoryOptions{Now: func() time.Time { return at }})
				t.Cleanup(func() { _ = st.Close() })
				l := limiter.New(st, limiter.Options{QuotaMode: tc.quota})
				l.SetRules(rs.Set)
				s := New(l, Options{Headers: HeaderOptions{Mode: mode, ShadowMode: tc.shadow,
					LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"}},
					zaptest.NewLogger(t))
				req := rlsRequest("d", "k", "v")
				if tc.quota && tc.wantCode == rlspb.RateLimitResponse_OK {
					req.Descriptors = append(req.Descriptors, rlsRequest("d", "unmatched", "x").Descriptors...)
				}
				var last *rlspb.RateLimitResponse
				for range 2 { // the second hit is over the limit of 1 a second
					if last, err = s.ShouldRateLimit(context.Background(), req); err != nil {
						t.Fatal(err)
					}
				}
				if d := last.GetStatuses()[0].GetDurationUntilReset(); d.GetSeconds() != 1 || d.GetNanos() != 0 {
					t.Errorf("duration_until_reset %v with 750ms left of a per-second window, want 1s", d)
				}
				var retry, others bool
				for _, h := range last.GetResponseHeadersToAdd() {
					if h.GetKey() == "Retry-After" {
						retry = true
					} else {
						others = true
					}
				}
				if last.GetOverallCode() != tc.wantCode || retry != tc.wantRetryAfter || !others {
					t.Errorf("code %v, Retry-After %v, other headers %v; want %v, %v, true (%v)",
						last.GetOverallCode(), retry, others, tc.wantCode, tc.wantRetryAfter, last.GetResponseHeadersToAdd())
				}
			})
		}
	}
}

// TestDurationUntilResetIsRetryTime: over its limit, a descriptor's
// duration_until_reset is when the same request would next be allowed, in
// whole seconds rounded up, as Envoy reads it for Retry-After: for a
// sliding window or a token bucket that is not the window's end or the
// bucket's refill; FastLimit's own headers say the same. The clock stands
// at 250 ms into a minute; 10 hits a minute, the eleventh over.
func TestDurationUntilResetIsRetryTime(t *testing.T) {
	for _, tc := range []struct {
		algorithm string
		hits      int
		want      int64 // seconds
	}{
		// The window ends in 59,750 ms.
		{"fixed_window", 10, 60},
		{"fixed_window", 11, 60},
		{"sliding_window", 10, 60},
		// The count of 10 slides into the next minute: share(10000, rem)
		// = floor(10000*rem/60000) <= 9000 for rem <= 54005, 5994 ms into
		// it: 59,750 + 5,994 = 65,744 ms.
		{"sliding_window", 11, 66},
		{"token_bucket", 10, 60}, // full again in 60 s
		{"token_bucket", 11, 6},  // a token every 6 s
	} {
		rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " +
			"{unit: minute, requests_per_unit: 10, algorithm: " + tc.algorithm + "}\n")})
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{HeadersIETF, HeadersLegacy} {
			at := time.Unix(1_800_000_000, 250_000_000)
			st := store.NewMemory(store.MemoryOptions{Now: func() time.Time { return at }})
			t.Cleanup(func() { _ = st.Close() })
			l := limiter.New(st, limiter.Options{})
			l.SetRules(rs.Set)
			s := New(l, Options{Headers: HeaderOptions{Mode: mode,
				LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"}},
				zaptest.NewLogger(t))
			var last *rlspb.RateLimitResponse
			for range tc.hits {
				if last, err = s.ShouldRateLimit(context.Background(), rlsRequest("d", "k", "v")); err != nil {
					t.Fatal(err)
				}
			}
			over := tc.hits > 10
			name := fmt.Sprintf("%s, %d hits, %s", tc.algorithm, tc.hits, mode)
			if got := last.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT; got != over {
				t.Fatalf("%s: over %v, want %v", name, got, over)
			}
			if d := last.GetStatuses()[0].GetDurationUntilReset(); d.GetSeconds() != tc.want || d.GetNanos() != 0 {
				t.Errorf("%s: duration_until_reset %v, want %ds", name, d, tc.want)
			}
			want := map[string]string{"RateLimit-Reset": fmt.Sprint(tc.want)}
			if mode == HeadersIETF {
				want = map[string]string{"RateLimit": fmt.Sprintf(`"d.k";r=0;t=%d`, tc.want)}
			}
			if over {
				want["Retry-After"] = fmt.Sprint(tc.want)
			}
			for _, h := range last.GetResponseHeadersToAdd() {
				if w, ok := want[h.GetKey()]; ok && h.GetValue() != w {
					t.Errorf("%s: %s: %s, want %s", name, h.GetKey(), h.GetValue(), w)
				}
				delete(want, h.GetKey())
			}
			if len(want) > 0 {
				t.Errorf("%s: headers %v lack %v", name, last.GetResponseHeadersToAdd(), want)
			}
		}
	}
}
