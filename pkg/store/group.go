package store

import (
	"slices"
	"sync"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// keyGroups puts the ops of each key together, in their order, so that
// take.lua reads and writes a hot key once a call. It is not safe for
// concurrent use; groupings pools them.
type keyGroups struct {
	group   map[string]int32 // key -> group
	of      []int32          // each op's group
	start   []int            // each group's first place in ops
	ops     []limiter.Op     // grouped
	results []limiter.Result // grouped
	perm    []int            // ops[i] = the caller's ops[perm[i]]
}

var groupings = sync.Pool{New: func() any { return &keyGroups{group: make(map[string]int32)} }}

// put returns ops grouped and the results to decode them into, which
// scatter hands back in the caller's order (ops and results themselves
// when no two ops share a key).
func (g *keyGroups) put(ops []limiter.Op, results []limiter.Result) ([]limiter.Op, []limiter.Result) {
	g.perm = g.perm[:0]
	if len(ops) < 2 {
		return ops, results
	}
	clear(g.group)
	g.of = g.of[:0]
	for i := range ops {
		k, ok := g.group[ops[i].Key]
		if !ok {
			k = int32(len(g.group))
			g.group[ops[i].Key] = k
		}
		g.of = append(g.of, k)
	}
	groups := len(g.group)
	clear(g.group) // hold no keys while pooled
	if groups == len(ops) {
		return ops, results
	}
	g.start = g.start[:0]
	for range groups + 1 {
		g.start = append(g.start, 0)
	}
	for _, k := range g.of {
		g.start[k+1]++
	}
	for k := 1; k <= groups; k++ {
		g.start[k] += g.start[k-1]
	}
	g.ops = slices.Grow(g.ops[:0], len(ops))[:len(ops)]
	g.perm = slices.Grow(g.perm[:0], len(ops))[:len(ops)]
	for i, k := range g.of {
		at := g.start[k]
		g.start[k]++
		g.ops[at], g.perm[at] = ops[i], i
	}
	if cap(g.results) < len(ops) {
		g.results = make([]limiter.Result, len(ops))
	}
	return g.ops, g.results[:len(ops)]
}

// scatter copies the grouped results into results, in the caller's order,
// and drops the grouped ops' keys.
func (g *keyGroups) scatter(results []limiter.Result) {
	for i, j := range g.perm {
		results[j] = g.results[i]
	}
	g.release()
}

// release drops what the grouping holds of its caller's ops.
func (g *keyGroups) release() {
	clear(g.ops)
	g.ops, g.perm = g.ops[:0], g.perm[:0]
}
