package limiter_test

import (
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// refund marks descriptor i of r a refund of hits (Envoy's
// is_negative_hits), and returns r.
func refund(r *limiter.Request[descriptors.Entry], i int, hits uint64) *limiter.Request[descriptors.Entry] {
	r.Descriptors[i].Refund, r.Descriptors[i].Hits, r.Descriptors[i].HasHits = true, hits, true
	return r
}

// hits sets descriptor i's hits, and returns r.
func hits(r *limiter.Request[descriptors.Entry], i int, n uint64) *limiter.Request[descriptors.Entry] {
	r.Descriptors[i].Hits, r.Descriptors[i].HasHits = n, true
	return r
}

// TestRefund: a refund gives hits back on every algorithm, answers OK with
// what remains after it (never past the limit), and makes no request
// OVER_LIMIT, nor counts among its quota descriptors.
func TestRefund(t *testing.T) {
	for _, key := range []string{"big", "sw", "small"} { // fixed window 100, sliding 3, bucket 50
		t.Run(key, func(t *testing.T) {
			l, _ := newAtomicLimiter(t, limiter.Options{})
			limit := check(t, l, hits(req("plain", key), 0, 0)).Statuses[0].Remaining // a peek: the whole limit
			resp := check(t, l, hits(req("plain", key), 0, uint64(limit)))
			if st := resp.Statuses[0]; st.Code != limiter.OK || st.Remaining != 0 {
				t.Fatalf("charging all %d: %+v", limit, st)
			}
			resp = check(t, l, refund(req("plain", key), 0, 2))
			if st := resp.Statuses[0]; resp.Code != limiter.OK || st.Code != limiter.OK || !st.Refund || st.Hits != 2 || st.Remaining != 2 {
				t.Fatalf("refund of 2 after %d charged: %v %+v, want OK, remaining 2", limit, resp.Code, st)
			}
			resp = check(t, l, refund(req("plain", key), 0, 1000))
			if st := resp.Statuses[0]; st.Code != limiter.OK || st.Remaining != limit {
				t.Fatalf("refund of 1000: %+v, want remaining %d, the limit", st, limit)
			}
			if st := check(t, l, hits(req("plain", key), 0, uint64(limit)+1)).Statuses[0]; st.Code != limiter.OverLimit {
				t.Fatalf("a refund gave back more than was charged: %+v", st)
			}
		})
	}

	t.Run("over the limit", func(t *testing.T) {
		l, _ := newAtomicLimiter(t, limiter.Options{})
		check(t, l, hits(req("plain", "one"), 0, 5)) // 5 of 1: over
		resp := check(t, l, refund(req("plain", "one", "one"), 0, 2))
		if resp.Code != limiter.OverLimit || resp.Statuses[0].Code != limiter.OK || resp.Statuses[1].Code != limiter.OverLimit {
			t.Fatalf("a refund beside an over-limit descriptor: %v %+v", resp.Code, resp.Statuses)
		}
	})
	t.Run("quota", func(t *testing.T) {
		l, _ := newAtomicLimiter(t, limiter.Options{})
		check(t, l, req("plain", "q1"))
		// q1 is over; the refund on q2 is no quota descriptor that is not.
		resp := check(t, l, refund(req("plain", "q1", "q2"), 1, 1))
		if resp.Code != limiter.OverLimit {
			t.Fatalf("quota descriptors all over but a refund: %v %+v", resp.Code, resp.Statuses)
		}
	})
}

// TestRefundAllOrNothing: in an all-or-nothing domain (as under the
// reference's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT) a refund lands
// whatever the request answers, as envoyproxy/ratelimit#1140 applies it,
// while the request's charges land only when it answers OK.
func TestRefundAllOrNothing(t *testing.T) {
	l, _ := newAtomicLimiter(t, limiter.Options{})
	check(t, l, hits(req("all", "a"), 0, 4)) // 4 of 5
	check(t, l, req("all", "one"))           // 1 of 1
	resp := check(t, l, refund(req("all", "a", "one", "big"), 0, 3))
	if resp.Code != limiter.OverLimit || resp.Statuses[0].Code != limiter.OK || resp.Statuses[0].Remaining != 4 {
		t.Fatalf("refund beside a denial: %v %+v, want OVER_LIMIT, the refund answering what it left", resp.Code, resp.Statuses)
	}
	if st := check(t, l, hits(req("all", "a"), 0, 0)).Statuses[0]; st.Remaining != 4 {
		t.Fatalf("a rejected request's refund was not written: remaining %d, want 4", st.Remaining)
	}
	if st := check(t, l, hits(req("all", "big"), 0, 0)).Statuses[0]; st.Remaining != 100 {
		t.Fatalf("a rejected request's charge was written: big's remaining %d, want 100", st.Remaining)
	}
	resp = check(t, l, refund(req("all", "a", "big"), 0, 3))
	if resp.Code != limiter.OK || resp.Statuses[0].Remaining != 5 || resp.Statuses[1].Remaining != 99 {
		t.Fatalf("refund with an allowed charge: %v %+v", resp.Code, resp.Statuses)
	}
	if a, big := peek(t, l, "all", "a"), peek(t, l, "all", "big"); a.Remaining != 5 || big.Remaining != 99 {
		t.Fatalf("a committed request's refund or charge was not written: remaining %d and %d, want 5 and 99", a.Remaining, big.Remaining)
	}
	// Refunds alone, and a refund of several limits.
	if resp := check(t, l, refund(req("all", "a"), 0, 1)); resp.Code != limiter.OK || resp.Statuses[0].Remaining != 5 {
		t.Fatalf("a refund alone: %v %+v", resp.Code, resp.Statuses)
	}
}
