package quota

import (
	"cmp"
	"math"
	"slices"
)

// Fair divides capacity among wants (not negative; +Inf allowed) by max-min
// fairness into shares (len(shares) >= len(wants)), adding up to capacity.
func Fair(capacity float64, wants, shares []float64) {
	fair(capacity, wants, shares, nil)
}

// fair is Fair with a scratch order, returned for the next call.
func fair(capacity float64, wants, shares []float64, order []int) []int {
	n := len(wants)
	if n == 0 {
		return order
	}
	order = order[:0]
	for i := range n {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(wants[a], wants[b]) })
	left := math.Max(capacity, 0)
	for k, i := range order {
		level := left / float64(n-k)
		if wants[i] > level {
			for _, j := range order[k:] {
				shares[j] = level
			}
			return order
		}
		shares[i] = wants[i]
		left -= wants[i]
	}
	extra := left / float64(n)
	for i := range n {
		shares[i] += extra
	}
	return order
}
