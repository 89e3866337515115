package limiter_test

import (
	"context"
	"slices"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// peekCases are requests of allOrNothingRules' keys, each descriptor of hits
// (0: 1).
var peekCases = map[string]struct {
	keys []string
	hits uint64
}{
	"fixed":          {[]string{"a"}, 0},
	"fixed 2 a hit":  {[]string{"a"}, 2},
	"two":            {[]string{"a", "one"}, 0},
	"sliding":        {[]string{"sw"}, 0},
	"bucket":         {[]string{"tb"}, 0},
	"shadow":         {[]string{"shadow", "a"}, 0},
	"quota":          {[]string{"q1", "q2"}, 0},
	"quota and free": {[]string{"q1", "qfree"}, 0},
	"unlimited":      {[]string{"free", "one"}, 0},
	"unmatched":      {[]string{"nope"}, 0},
}

// TestPeek: before every Check of a sequence, Peek foretells its overall
// code and each descriptor's code, charging nothing: a Peek twice in a row
// answers the same, on plain and all-or-nothing domains alike.
func TestPeek(t *testing.T) {
	for name, tc := range peekCases {
		for _, domain := range []string{"plain", "all"} {
			t.Run(name+"/"+domain, func(t *testing.T) {
				l, _ := newAllOrNothingLimiter(t, limiter.Options{})
				mk := func() *limiter.Request[descriptors.Entry] {
					r := req(domain, tc.keys...)
					if tc.hits > 0 {
						for i := range r.Descriptors {
							hits(r, i, tc.hits)
						}
					}
					return r
				}
				for step := range 8 {
					p := peek1(t, l, mk())
					if again := peek1(t, l, mk()); again.Code != p.Code || !slices.Equal(codes(&again.Response), codes(&p.Response)) {
						t.Fatalf("step %d: a second Peek answered %v, the first %v", step, again.Code, p.Code)
					}
					c := check(t, l, mk())
					if p.Code != c.Code || !slices.Equal(codes(&p.Response), codes(c)) {
						t.Fatalf("step %d: Peek %v %v, Check %v %v", step, p.Code, codes(&p.Response), c.Code, codes(c))
					}
				}
			})
		}
	}
}

func peek1(t *testing.T, l *limiter.Limiter, r *limiter.Request[descriptors.Entry]) *limiter.Peeked {
	t.Helper()
	p, err := limiter.Peek(context.Background(), l, r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResetGivesTheLimitBack: Reset of a descriptor over its limit, keyed
// as Check keys it, makes its next request OK with the whole limit left;
// its keys are Peek's, "" for a descriptor without a store op.
func TestResetGivesTheLimitBack(t *testing.T) {
	for _, domain := range []string{"plain", "all"} {
		t.Run(domain, func(t *testing.T) {
			l, m := newAllOrNothingLimiter(t, limiter.Options{})
			for range 6 {
				check(t, l, req(domain, "a", "tb"))
			}
			r := req(domain, "a", "tb", "free")
			if p := peek1(t, l, r); p.Code != limiter.OverLimit {
				t.Fatalf("after 6 hits of 5: %v", p.Code)
			}
			keys, err := limiter.Reset(context.Background(), l, m, r)
			if err != nil {
				t.Fatal(err)
			}
			p := peek1(t, l, r)
			if !slices.Equal(keys, p.Keys) || keys[0] == "" || keys[1] == "" || keys[2] != "" {
				t.Errorf("Reset keys %q, Peek keys %q", keys, p.Keys)
			}
			if p.Code != limiter.OK || p.Statuses[0].Remaining != 5 || p.Statuses[1].Remaining != 2 {
				t.Errorf("after Reset: %v %+v", p.Code, p.Statuses)
			}
		})
	}
}
