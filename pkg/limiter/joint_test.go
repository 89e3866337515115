package limiter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// jointDay is the start of a day in Unix ms, the clock's origin in these
// tests.
const jointDay = 1_750_032_000_000

// jointRules are the rules of domain "plain" and its twin "all" (atomic: true).
const jointRules = `
descriptors:
  - {key: plan, rate_limits: [{unit: second, requests_per_unit: 10}, {unit: day, requests_per_unit: 1000}]}
  - key: mixed
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 5, algorithm: token_bucket}
      - {name: hourly, unit: hour, requests_per_unit: 20, algorithm: sliding_window}
  - {key: share, rate_limits: [{unit: hour, requests_per_unit: 10}, {unit: day, requests_per_unit: 100, algorithm: sliding_window}]}
  - key: named
    rate_limits: [{name: burst, unit: second, requests_per_unit: 10}, {name: daily, unit: day, requests_per_unit: 3}]
  - {key: premium, rate_limit: {unit: day, requests_per_unit: 100, replaces: [{name: daily}]}}
  - {key: all_named, rate_limit: {unit: day, requests_per_unit: 100, replaces: [{name: daily}, {name: burst}]}}
  - {key: shadow, shadow_mode: true, rate_limits: [{unit: hour, requests_per_unit: 2}, {unit: day, requests_per_unit: 3}]}
  - {key: qa, quota_mode: true, rate_limits: [{unit: hour, requests_per_unit: 1}, {unit: day, requests_per_unit: 5}]}
  - {key: qb, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: single, rate_limit: {unit: hour, requests_per_unit: 5}}
  - key: stretch
    rate_limits: [{unit: second, unit_multiplier: 10, requests_per_unit: 3}, {unit: minute, requests_per_unit: 100}]
`

func jointSet(t testing.TB) *descriptors.Set {
	t.Helper()
	r, err := rules.Parse(map[string][]byte{
		"plain.yaml": []byte("domain: plain" + jointRules),
		"all.yaml":   []byte("domain: all\natomic: true" + jointRules),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r.Set
}

// newJointLimiter returns a limiter with jointRules on a fresh memory
// store, and the store's clock (ms after jointDay).
func newJointLimiter(t testing.TB) (*limiter.Limiter, *jointClock) {
	t.Helper()
	clock := new(jointClock)
	m := store.NewMemory(store.MemoryOptions{Now: func() time.Time { return time.UnixMilli(jointDay + clock.ms) }})
	t.Cleanup(func() { _ = m.Close() })
	l := limiter.New(m, limiter.Options{})
	l.SetRules(jointSet(t))
	return l, clock
}

// jointClock is the store's clock, ms after jointDay; the tests read and
// set it from one goroutine.
type jointClock struct{ ms int64 }

func (c *jointClock) Store(ms int64) { c.ms = ms }
func (c *jointClock) Add(ms int64)   { c.ms += ms }

// parts lists the remaining of each part of st.
func parts(st limiter.Status) []uint32 {
	out := make([]uint32, len(st.Parts))
	for i, p := range st.Parts {
		out[i] = p.Remaining
	}
	return out
}

// TestJointSecondAndDay: 10 a second and 1,000 a day on one key. Ten in a
// second pass, the eleventh is OVER_LIMIT by the second and charges
// neither; after 1,000 in a day the day denies though the second is
// fresh, and charges neither either.
func TestJointSecondAndDay(t *testing.T) {
	for _, domain := range []string{"plain", "all"} {
		t.Run(domain, func(t *testing.T) {
			l, clock := newJointLimiter(t)
			for s := range int64(100) {
				clock.Store(s * 1000)
				for i := range 10 {
					st := check(t, l, req(domain, "plan")).Statuses[0]
					if st.Code != limiter.OK || len(st.Parts) != 2 {
						t.Fatalf("second %d hit %d: %+v", s, i, st)
					}
				}
				resp := check(t, l, req(domain, "plan"))
				st := resp.Statuses[0]
				if s == 99 { // the day's 1,001st: both deny, and the day's wait is the longer
					if resp.Code != limiter.OverLimit || st.Limit != st.Parts[1].Limit || st.Parts[0].Code != limiter.OverLimit {
						t.Fatalf("the day's 1,001st: %v %+v, want OVER_LIMIT by the day", resp.Code, st)
					}
				} else if resp.Code != limiter.OverLimit || st.Limit != st.Parts[0].Limit || st.Parts[1].Code != limiter.OK || st.RetryAfterMillis != 1000 {
					t.Fatalf("second %d, the 11th: %v %+v, want OVER_LIMIT by the second, retry after 1 s", s, resp.Code, st)
				}
				if p := parts(peek(t, l, domain, "plan")); p[0] != 0 || p[1] != uint32(1000-10*(s+1)) {
					t.Fatalf("second %d: after the 11th, remaining %v, want [0 %d]", s, p, 1000-10*(s+1))
				}
			}
			clock.Store(100_000)
			resp := check(t, l, req(domain, "plan"))
			st := resp.Statuses[0]
			if resp.Code != limiter.OverLimit || st.Limit != st.Parts[1].Limit || st.Parts[0].Code != limiter.OK {
				t.Fatalf("after 1,000 in the day: %v %+v, want OVER_LIMIT by the day", resp.Code, st)
			}
			if want := int64(86_400_000 - 100_000); st.RetryAfterMillis != want {
				t.Errorf("retry after %d ms, want %d, the day's end", st.RetryAfterMillis, want)
			}
			if p := parts(peek(t, l, domain, "plan")); p[0] != 10 || p[1] != 0 {
				t.Errorf("after the day's denial, remaining %v, want [10 0]", p)
			}
			clock.Store(86_400_000)
			if st := check(t, l, req(domain, "plan")).Statuses[0]; st.Code != limiter.OK || parts(st)[1] != 999 {
				t.Errorf("the next day: %+v", st)
			}
		})
	}
}

// TestJointStatus: the status is the limit that denied (the longest
// wait of several) or, when all allow, the one with the least share left.
func TestJointStatus(t *testing.T) {
	l, clock := newJointLimiter(t)
	clock.Store(30 * 60_000)
	for i := range 5 {
		st := check(t, l, req("plain", "share")).Statuses[0]
		// hour: 10-(i+1) of 10; day: 100-(i+1) of 100: the hour's share is less.
		if st.Limit.Unit != descriptors.Hour || st.Remaining != uint32(9-i) {
			t.Fatalf("hit %d: %s remaining %d, want the hour's %d", i, st.Limit.Label(), st.Remaining, 9-i)
		}
	}
	for range 5 {
		check(t, l, req("plain", "share"))
	}
	st := check(t, l, req("plain", "share")).Statuses[0]
	if st.Code != limiter.OverLimit || st.Limit.Unit != descriptors.Hour || st.RetryAfterMillis != 30*60_000 {
		t.Fatalf("the 11th: %+v", st)
	}
	// mixed: a bucket of 5 refilled 5 a second and 20 an hour, sliding.
	for range 5 {
		check(t, l, req("plain", "mixed"))
	}
	st = check(t, l, req("plain", "mixed")).Statuses[0]
	if st.Code != limiter.OverLimit || st.Limit.Name != "burst" || st.RetryAfterMillis != 200 {
		t.Fatalf("mixed, the 6th at once: %+v, want burst's denial, retry 200 ms", st)
	}
	// The denial charged neither: 15 more, a second apart, make 20 in the hour.
	for i := range 15 {
		clock.Add(1000)
		st := check(t, l, req("plain", "mixed")).Statuses[0]
		if st.Code != limiter.OK {
			t.Fatalf("mixed, a second later (%d): %+v", i, st)
		}
		if i == 14 && (st.Limit.Name != "hourly" || st.Remaining != 0) {
			t.Fatalf("mixed, the 20th of the hour: %+v, want hourly with 0 left", st)
		}
	}
	st = check(t, l, req("plain", "mixed")).Statuses[0]
	if st.Code != limiter.OverLimit || st.Limit.Name != "hourly" || st.Parts[0].Code != limiter.OK {
		t.Fatalf("mixed, the 21st: %+v, want hourly's denial", st)
	}
}

// TestJointReplaces: a limit of a joint is replaced on its own; a joint
// all of whose limits are replaced is as a replaced limit.
func TestJointReplaces(t *testing.T) {
	l, _ := newJointLimiter(t)
	for range 3 {
		check(t, l, req("plain", "named"))
	}
	resp := check(t, l, req("plain", "named"))
	if resp.Code != limiter.OverLimit || resp.Statuses[0].Limit.Name != "daily" {
		t.Fatalf("the 4th of 3 a day: %v %+v", resp.Code, resp.Statuses[0])
	}
	resp = check(t, l, req("plain", "named", "premium"))
	st := resp.Statuses[0]
	// burst counted 3 of 10 (the denied 4th charged neither), now 4.
	if resp.Code != limiter.OK || len(st.Parts) != 1 || st.Limit.Name != "burst" || st.Remaining != 6 {
		t.Fatalf("with premium replacing daily: %v %+v, want burst alone, 6 left", resp.Code, st)
	}
	resp = check(t, l, req("plain", "named", "all_named"))
	if st := resp.Statuses[0]; resp.Code != limiter.OK || st.Limit != nil || !st.Replaced || st.Parts != nil {
		t.Fatalf("with both replaced: %v %+v", resp.Code, st)
	}
}

// TestJointShadowQuotaRefund: shadow mode answers a joint's denial OK and
// charges none; a quota joint counts as one quota descriptor; a refund
// gives back to every limit.
func TestJointShadowQuotaRefund(t *testing.T) {
	for _, domain := range []string{"plain", "all"} {
		t.Run(domain, func(t *testing.T) {
			l, clock := newJointLimiter(t)
			clock.Store(30 * 60_000)
			check(t, l, req(domain, "shadow"))
			check(t, l, req(domain, "shadow"))
			resp := check(t, l, req(domain, "shadow", "single"))
			if st := resp.Statuses[0]; resp.Code != limiter.OK || !st.Shadowed || !st.Parts[0].Shadowed || st.Parts[1].Shadowed {
				t.Fatalf("shadowed: %v %+v", resp.Code, st)
			}
			if p := parts(peek(t, l, domain, "shadow")); p[0] != 0 || p[1] != 1 {
				t.Errorf("after the shadowed denial, remaining %v, want [0 1]: charged to neither", p)
			}
			if st := peek(t, l, domain, "single"); st.Remaining != 4 {
				t.Errorf("single beside the shadowed joint: remaining %d, want 4", st.Remaining)
			}

			check(t, l, req(domain, "qa")) // qa's hour used up
			resp = check(t, l, req(domain, "qa", "qb"))
			if resp.Code != limiter.OK || resp.Statuses[0].Code != limiter.OverLimit || resp.Statuses[1].Code != limiter.OK {
				t.Fatalf("qa over, qb not: %v %v", resp.Code, codes(resp))
			}
			if p := parts(peek(t, l, domain, "qa")); p[0] != 0 || p[1] != 4 {
				t.Errorf("qa after its denial: remaining %v, want [0 4]", p)
			}
			resp = check(t, l, req(domain, "qa", "qb"))
			if resp.Code != limiter.OverLimit {
				t.Fatalf("qa and qb over: %v %v", resp.Code, codes(resp))
			}

			for range 4 {
				check(t, l, req(domain, "share"))
			}
			st := check(t, l, refund(req(domain, "share"), 0, 3)).Statuses[0]
			if st.Code != limiter.OK || !st.Refund || !st.Parts[0].Refund {
				t.Fatalf("refund: %+v", st)
			}
			if p := parts(peek(t, l, domain, "share")); p[0] != 9 || p[1] != 99 {
				t.Errorf("after 4 charged and 3 refunded: remaining %v, want [9 99]", p)
			}
		})
	}
}

// TestJointAllOrNothing: in an all-or-nothing domain a joint is one more set of
// ops: a denial by one of its limits rejects the request, and nothing of
// it is charged.
func TestJointAllOrNothing(t *testing.T) {
	l, _ := newJointLimiter(t)
	for range 3 {
		check(t, l, req("all", "named", "single"))
	}
	resp := check(t, l, req("all", "single", "named"))
	if resp.Code != limiter.OverLimit || resp.Statuses[0].Code != limiter.OK {
		t.Fatalf("named's daily over: %v %v", resp.Code, codes(resp))
	}
	if st := peek(t, l, "all", "single"); st.Remaining != 2 {
		t.Errorf("single after the rejected request: remaining %d, want 2", st.Remaining)
	}
	if p := parts(peek(t, l, "all", "named")); p[0] != 7 || p[1] != 0 {
		t.Errorf("named after the rejected request: remaining %v, want [7 0]", p)
	}
}

// TestJointUnitMultiplier: each limit of a joint keeps its own window.
func TestJointUnitMultiplier(t *testing.T) {
	l, clock := newJointLimiter(t)
	for range 3 {
		check(t, l, req("plain", "stretch"))
	}
	clock.Store(9_999)
	if st := check(t, l, req("plain", "stretch")).Statuses[0]; st.Code != limiter.OverLimit || st.Limit.WindowMillis() != 10_000 {
		t.Fatalf("the 4th within 10 s: %+v", st)
	}
	clock.Store(10_000)
	if st := check(t, l, req("plain", "stretch")).Statuses[0]; st.Code != limiter.OK || parts(st)[1] != 96 {
		t.Fatalf("after 10 s: %+v", st)
	}
}

// TestJointKeys: the limits of a joint count on keys of their own, the
// first on the key a rule's only limit would have; all share its hash tag.
func TestJointKeys(t *testing.T) {
	set := jointSet(t)
	for _, domain := range []string{"plain", "all"} {
		l := descriptors.Match(set.Domain(domain), []descriptors.Entry{{Key: "plan", Value: "v"}})
		entries := []descriptors.Entry{{Key: "plan", Value: "v"}}
		appendKey := limiter.AppendKey[descriptors.Entry]
		if domain == "all" {
			appendKey = limiter.AppendAllOrNothingKey[descriptors.Entry]
		}
		first := string(appendKey(nil, "rl", domain, l.Joint[0], entries, "default"))
		second := string(appendKey(nil, "rl", domain, l.Joint[1], entries, "default"))
		want := map[string][2]string{
			"plain": {"rl:{plain/plan=v}:default:", "rl:{plain/plan=v}:default:#1:"},
			"all":   {"rl:{all}/plan=v:default:", "rl:{all}/plan=v:default:#1:"},
		}[domain]
		if first != want[0] || second != want[1] {
			t.Errorf("%s: keys %q %q, want %q %q", domain, first, second, want[0], want[1])
		}
	}
}

// TestRejectsJoints: in an all-or-nothing call, a quota joint is denied
// when one of its ops is, and the call rejected when every quota joint or
// op is.
func TestRejectsJoints(t *testing.T) {
	q := func(joined bool) limiter.Op { return limiter.Op{Veto: limiter.VetoQuota, Joined: joined} }
	ok, no := limiter.Result{Allowed: true}, limiter.Result{}
	for _, tc := range []struct {
		name   string
		ops    []limiter.Op
		res    []limiter.Result
		reject bool
	}{
		{"one joint, one op denied", []limiter.Op{q(false), q(true)}, []limiter.Result{ok, no}, true},
		{"a joint denied, a quota op allowed", []limiter.Op{q(false), q(true), q(false)}, []limiter.Result{no, ok, ok}, false},
		{"a joint and a quota op denied", []limiter.Op{q(false), q(true), q(false)}, []limiter.Result{ok, no, no}, true},
		{"two joints, each with a denial", []limiter.Op{q(false), q(true), q(false), q(true)}, []limiter.Result{no, no, ok, no}, true},
		{"two joints, one allowed", []limiter.Op{q(false), q(true), q(false), q(true)}, []limiter.Result{no, no, ok, ok}, false},
	} {
		if got := limiter.Rejects(tc.ops, tc.res); got != tc.reject {
			t.Errorf("%s: Rejects = %v, want %v", tc.name, got, tc.reject)
		}
	}
}

// TestJointPeek: Peek foretells a rule of several limits as Check decides
// it, charging nothing, with the key of the limit that decides.
func TestJointPeek(t *testing.T) {
	l, _ := newJointLimiter(t)
	for range 3 {
		check(t, l, req("plain", "named"))
	}
	for range 2 {
		p, err := limiter.Peek(context.Background(), l, req("plain", "named"))
		if err != nil {
			t.Fatal(err)
		}
		st := p.Statuses[0]
		if p.Code != limiter.OverLimit || st.Limit.Name != "daily" || len(st.Parts) != 2 || !strings.HasSuffix(p.Keys[0], ":#1:") {
			t.Fatalf("Peek after 3 of 3 a day: %v %+v keys %q", p.Code, st, p.Keys)
		}
		if pk := p.PartKeys[0]; len(pk) != 2 || pk[1] != p.Keys[0] || strings.Contains(pk[0], "#") || !strings.HasPrefix(pk[1], pk[0]) {
			t.Errorf("Peek's keys of each limit: %q, the deciding %q", pk, p.Keys[0])
		}
	}
	// The second's answer is as if charged: 3 before, this one the 4th.
	if st := check(t, l, req("plain", "named")).Statuses[0]; st.Code != limiter.OverLimit || parts(st)[0] != 6 {
		t.Errorf("Check after the peeks: %+v, want OVER_LIMIT with 6 of the second's 10 left", st)
	}
}
