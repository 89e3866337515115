package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
)

// TestRefunds: a descriptor with is_negative_hits (field 4 of Envoy's
// RateLimitDescriptor, as Envoy AI Gateway sends it for tokens a response
// did not use) gives its hits back on every algorithm and on both stores,
// through the real binary: remaining goes up, never past the limit, an
// exhausted limit admits again, and the hits given back are counted apart
// from those charged. /json takes is_negative_hits too.
func TestRefunds(t *testing.T) {
	stores(t, func(t *testing.T, extra ...string) {
		admin := loopback.Addr(t)
		srv := startServer(t, files.Dir(t, map[string]string{"e2e.yaml": coreRules}), true, append(extra, "--admin-addr", admin)...)
		ctx := ctxTimeout(t, 30*time.Second)
		id := fmt.Sprint(time.Now().UnixNano())
		call := func(key string, hits uint64, refund bool) *rls.RateLimitResponse_DescriptorStatus {
			t.Helper()
			d := desc(key, id)
			d.HitsAddend = wrapperspb.UInt64(hits)
			d.IsNegativeHits = refund
			r, err := srv.Client.ShouldRateLimit(ctx, request(d))
			if err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			if r.Statuses[0].Code != r.OverallCode {
				t.Fatalf("overall %v, status %v", r.OverallCode, r.Statuses[0])
			}
			return r.Statuses[0]
		}
		for _, tc := range []struct{ key, rule string }{
			{"fixed", "e2e.fixed"}, {"sliding", "e2e.sliding"}, {"bucket", "e2e.bucket"},
		} {
			t.Run(tc.key, func(t *testing.T) {
				if st := call(tc.key, 10, false); st.LimitRemaining != 90 {
					t.Fatalf("charge 10: %v", st)
				}
				if st := call(tc.key, 4, true); st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 94 {
					t.Fatalf("refund 4: %v, want OK with 94 remaining", st)
				}
				if st := call(tc.key, 1000, true); st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 100 {
					t.Fatalf("refund 1000: %v, want OK with the limit (100) remaining", st)
				}
				if st := call(tc.key, 100, false); st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 0 {
					t.Fatalf("charge 100 after the refunds: %v", st)
				}
			})
		}
		t.Run("an exhausted limit admits again", func(t *testing.T) {
			for range 3 {
				call("small", 1, false)
			}
			if st := call("small", 1, false); st.Code != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("4th hit of 3: %v", st)
			}
			// A fixed window counts the denied hit too (as the reference
			// does): 4 counted, so giving 2 back leaves room for 1.
			if st := call("small", 2, true); st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 1 {
				t.Fatalf("refund 2 of an exhausted limit: %v, want OK with 1 remaining", st)
			}
			if st := call("small", 1, false); st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 0 {
				t.Fatalf("the hit the refund made room for: %v", st)
			}
		})
		t.Run("json", func(t *testing.T) {
			post := func(hits int, refund bool) *rls.RateLimitResponse {
				t.Helper()
				body := fmt.Sprintf(`{"domain":"e2e","descriptors":[{"entries":[{"key":"fixed","value":"%s-json"}],"hits_addend":%d,"is_negative_hits":%t}]}`, id, hits, refund)
				code, out := postJSON(t, srv, body)
				var resp rls.RateLimitResponse
				if err := protojson.Unmarshal([]byte(out), &resp); code != http.StatusOK || err != nil || len(resp.Statuses) != 1 {
					t.Fatalf("/json %s: %d %s (%v)", body, code, out, err)
				}
				return &resp
			}
			post(10, false)
			if st := post(4, true).Statuses[0]; st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 94 {
				t.Fatalf("/json refund 4 after 10: %v, want OK with 94 remaining", st)
			}
		})
		t.Run("metrics count refunds apart", func(t *testing.T) {
			body := metricsPage(t, admin)
			wantSeries(t, body, map[string]float64{
				`fastlimit_rule_refunded_hits_total{domain="e2e",rule="e2e.fixed"}`:   1008,
				`fastlimit_rule_total_hits_total{domain="e2e",rule="e2e.fixed"}`:      120,
				`fastlimit_rule_refunded_hits_total{domain="e2e",rule="e2e.bucket"}`:  1004,
				`fastlimit_rule_refunded_hits_total{domain="e2e",rule="small"}`:       2,
				`fastlimit_rule_total_hits_total{domain="e2e",rule="small"}`:          5,
				`fastlimit_rule_over_limit_total{domain="e2e",rule="small"}`:          1,
				`fastlimit_rule_refunded_hits_total{domain="e2e",rule="e2e.sliding"}`: 1004,
			})
		})
	})
}
