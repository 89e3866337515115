package rlqs

import (
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// TestBurstSizing: a bucket's max_tokens (docs/rlqs.md, "Bursts") across
// the answers one Envoy gets, on a limit of 300/s with a burst of 300.
func TestBurstSizing(t *testing.T) {
	type answer struct {
		rate, target, demand float64
		want                 float64 // max_tokens sent; 0 for DENY_ALL (none)
	}
	for _, tc := range []struct {
		name    string
		answers []answer
	}{
		{"sized by its share", []answer{{75, 75, 600, 75}}},
		{"sized by its target while granted less", []answer{{10, 75, 600, 75}}},
		{"does not grow while its Envoy wants more", []answer{{75, 75, 600, 75}, {288, 288, 600, 75}}},
		{"grows once its Envoy wants no more than it holds", []answer{{75, 75, 600, 75}, {288, 288, 200, 288}}},
		{"shrinks with its share", []answer{{150, 150, 600, 150}, {75, 75, 600, 75}}},
		// The first answer came before the division had a target: DENY_ALL
		// gives no bucket, and fixes no size. (It fixed 1, for good.)
		{"DENY_ALL sizes nothing", []answer{{0, 0, 600, 0}, {288, 288, 600, 288}}},
		{"DENY_ALL between two shares", []answer{{75, 75, 600, 75}, {0, 0, 600, 0}, {288, 288, 600, 75}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := quota.Limit{Rate: 300, Burst: 300}
			dv := &division{q: quota.NewBucket(l), buckets: map[string]*envoyBucket{}}
			b := &envoyBucket{client: "c"}
			dv.join(b, l, time.Unix(0, 0), false)
			c := dv.q.Client("c")
			for i, a := range tc.answers {
				c.Known, c.Demand, c.Assigned, b.target = true, a.demand, a.rate, a.target
				got := dv.current(b).burst
				if got != a.want {
					t.Errorf("answer %d (%.0f/s, target %.0f, demand %.0f): max_tokens %.0f, want %.0f", i, a.rate, a.target, a.demand, got, a.want)
				}
			}
		})
	}
}
