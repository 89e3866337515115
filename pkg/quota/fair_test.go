package quota_test

import (
	"math"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

func TestFair(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name     string
		capacity float64
		wants    []float64
		want     []float64
	}{
		{"contended equal", 300, []float64{800, 100, 100}, []float64{100, 100, 100}},
		{"small want met, rest shared", 300, []float64{800, 50, 400}, []float64{125, 50, 125}},
		{"all met, leftover even", 300, []float64{55, 110, 110}, []float64{63.333, 118.333, 118.333}},
		{"unknown wants the level", 300, []float64{inf, 40, inf}, []float64{130, 40, 130}},
		{"one client", 300, []float64{10}, []float64{300}},
		{"zero capacity", 0, []float64{5, 5}, []float64{0, 0}},
		{"zero wants", 90, []float64{0, 0, 0}, []float64{30, 30, 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]float64, len(tc.wants))
			quota.Fair(tc.capacity, tc.wants, got)
			for i := range got {
				if math.Abs(got[i]-tc.want[i]) > 0.001 {
					t.Fatalf("shares = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// FuzzFair checks max-min fairness' defining properties: shares add up to
// the capacity, no share is negative, a share below its want is the
// largest share of all (nobody gets more than an unmet client, except
// through the even split of a surplus), and a met want under contention
// is met exactly.
func FuzzFair(f *testing.F) {
	f.Add(300.0, 800.0, 100.0, 100.0, 5.0)
	f.Add(1.0, 0.0, 0.5, 3.0, 1e9)
	f.Fuzz(func(t *testing.T, capacity, a, b, c, d float64) {
		wants := []float64{a, b, c, d}
		for _, w := range append(wants, capacity) {
			if math.IsNaN(w) || w < 0 || w > 1e12 {
				return
			}
		}
		shares := make([]float64, len(wants))
		quota.Fair(capacity, wants, shares)
		sum, top := 0.0, 0.0
		for _, s := range shares {
			if s < 0 {
				t.Fatalf("negative share %v", shares)
			}
			sum += s
			top = math.Max(top, s)
		}
		eps := 1e-9 * math.Max(1, capacity)
		if math.Abs(sum-capacity) > eps*4 {
			t.Fatalf("shares %v add to %v, capacity %v", shares, sum, capacity)
		}
		total := a + b + c + d
		for i, s := range shares {
			if s < wants[i]-eps && s < top-eps {
				t.Fatalf("unmet want %v got %v below the top share %v: %v", wants[i], s, top, shares)
			}
			if total > capacity && s > wants[i]+eps {
				t.Fatalf("contended, yet share %v above want %v: %v", s, wants[i], shares)
			}
		}
	})
}
