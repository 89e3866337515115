package descriptors

import (
	"slices"
	"strings"
)

// MaxBucketEntries is the most entries MatchBucket orders.
const MaxBucketEntries = 16

// maxBucketSteps bounds the rule nodes one MatchBucket visits.
const maxBucketSteps = 4096

// MatchBucket matches entries in no order (an Envoy quota bucket id) to a
// limit, the rules choosing the order (docs/rlqs.md, "Buckets and rules").
// It returns the limit and the entries in matched order, or nil and nil.
// Keys must be distinct; over MaxBucketEntries entries match nothing.
func MatchBucket(d *Domain, entries []Entry) (*Limit, []Entry) {
	if d == nil || len(entries) == 0 || len(entries) > MaxBucketEntries {
		return nil, nil
	}
	m := bucketMatch{entries: entries, used: make([]bool, len(entries)), order: make([]Entry, 0, len(entries))}
	if l := m.walk(&d.root); l != nil {
		return l, m.order
	}
	return nil, nil
}

type bucketMatch struct {
	entries []Entry
	used    []bool
	order   []Entry
	steps   int
}

// candidate is an entry a node can step on, with its match class.
type candidate struct {
	i     int
	class int // 0 exact, 1 wildcard, 2 key-only
	next  *node
}

func (m *bucketMatch) walk(n *node) *Limit {
	if len(m.order) == len(m.entries) {
		return n.limit
	}
	m.steps++
	if m.steps > maxBucketSteps {
		return nil
	}
	var buf [MaxBucketEntries]candidate
	cands := buf[:0]
	for i, e := range m.entries {
		if m.used[i] {
			continue
		}
		if next, class := n.stepClass(e.Key, e.Value); next != nil {
			cands = append(cands, candidate{i, class, next})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.class != b.class {
			return a.class - b.class
		}
		return strings.Compare(m.entries[a.i].Key, m.entries[b.i].Key)
	})
	for _, c := range cands {
		m.used[c.i] = true
		m.order = append(m.order, m.entries[c.i])
		if l := m.walk(c.next); l != nil {
			return l
		}
		m.order = m.order[:len(m.order)-1]
		m.used[c.i] = false
	}
	return nil
}

// stepClass is step, also saying which kind of rule matched.
func (n *node) stepClass(key, value string) (*node, int) {
	if next, ok := n.exact[kv{key, value}]; ok {
		return next, 0
	}
	for _, w := range n.wild[key] {
		if w.pat.match(value) {
			return w.node, 1
		}
	}
	if next := n.keyOnly[key]; next != nil {
		return next, 2
	}
	return nil, 0
}
