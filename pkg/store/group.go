package store

import (
	"slices"
	"sync"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// keyGroups puts the ops of one key next to each other, each key's ops in
// their order, so that a take.lua call decides them as one group: one read
// and one write of the key, whatever the number of ops (a hot key).
// Ops of different keys are independent, so their order is free. It is
// not safe for concurrent use; groupings pools them.
type keyGroups struct {
	group   map[string]int32 // key -> group
	of      []int32          // each op's group
	start   []int            // each group's first place in ops
	ops     []limiter.Op     // grouped
	results []limiter.Result // grouped
	perm    []int            // ops[i] = the caller's ops[perm[i]]
}

var groupings = sync.Pool{New: func() any { return &keyGroups{group: make(map[string]int32)} }}

// put returns ops with each key's ops together, and the results to decode
// them into; scatter then hands those results back in the caller's order.
// When no two ops share a key, they are ops and results themselves.
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
	// Every index is written below, once: the prefix sums cover each.
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
