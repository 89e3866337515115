package limiter_test

import (
	"testing"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestGlobalQuotaMode: with Options.QuotaMode every descriptor but an
// unlimited one is a quota descriptor, unmatched ones included (they
// pass); the request is OVER_LIMIT only when all of them are over. A
// refund is none of them. In an all-or-nothing domain the store commits
// exactly when the answer is OK: an OK request's hits are all counted,
// an OVER_LIMIT one's none.
func TestGlobalQuotaMode(t *testing.T) {
	for _, domain := range []string{"plain", "all"} {
		t.Run(domain, func(t *testing.T) {
			l, _ := newAllOrNothingLimiter(t, limiter.Options{QuotaMode: true})
			check(t, l, req(domain, "one")) // one: 1 of 1
			if resp := check(t, l, req(domain, "one")); resp.Code != limiter.OverLimit || !resp.Statuses[0].Quota {
				t.Fatalf("the only descriptor over: %v %+v, want OVER_LIMIT", resp.Code, resp.Statuses)
			}
			resp := check(t, l, req(domain, "one", "a"))
			if resp.Code != limiter.OK || resp.Statuses[0].Code != limiter.OverLimit || resp.Statuses[1].Code != limiter.OK {
				t.Fatalf("one of two over: %v %+v, want OK with the statuses kept", resp.Code, resp.Statuses)
			}
			if st := peek(t, l, domain, "a"); st.Remaining != 4 {
				t.Fatalf("the OK request's hit on a: remaining %d, want 4 (committed)", st.Remaining)
			}
			if resp := check(t, l, req(domain, "one", "unmatched")); resp.Code != limiter.OK {
				t.Fatalf("over beside an unmatched descriptor: %v %+v, want OK", resp.Code, resp.Statuses)
			}
			if resp := check(t, l, req(domain, "one", "free")); resp.Code != limiter.OverLimit || resp.Statuses[1].Quota {
				t.Fatalf("over beside an unlimited descriptor: %v %+v, want OVER_LIMIT (unlimited is no quota descriptor)", resp.Code, resp.Statuses)
			}
			if resp := check(t, l, refund(req(domain, "one", "a"), 1, 1)); resp.Code != limiter.OverLimit {
				t.Fatalf("over beside a refund: %v %+v, want OVER_LIMIT (a refund is no quota descriptor)", resp.Code, resp.Statuses)
			}
		})
	}
}
