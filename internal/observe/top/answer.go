package top

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// By says which ranking: by over-limit hits or by hits.
type By string

// Rankings.
const (
	ByOverLimit By = "over_limit"
	ByHits      By = "hits"
)

// ParseBy parses "over_limit" (the default, for "") or "hits".
func ParseBy(s string) (By, error) {
	if b := By(cmp.Or(s, string(ByOverLimit))); b == ByOverLimit || b == ByHits {
		return b, nil
	}
	return "", fmt.Errorf("by %q: give over_limit or hits", s)
}

// Answer is a Top answer, or several replicas' merged by Merge.
type Answer struct {
	// Window is the decay's time constant; Keys the identifiers kept per
	// rule and ranking.
	Window string `json:"window"`
	Keys   int    `json:"keys"`
	// Replicas is how many answers were merged (1 for one replica's).
	Replicas int       `json:"replicas"`
	Rules    []Ranking `json:"rules"`
}

// Ranking is one rule's top identifiers, largest count first.
type Ranking struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Source string `json:"source,omitempty"`
	By     string `json:"by"`
	Shadow bool   `json:"shadow_mode,omitempty"`
	// Unlisted is the most an identifier not listed may have: the
	// smallest count kept when the summary is full, or the first left out.
	Unlisted float64 `json:"unlisted_max"`
	Entries  []Entry `json:"entries"`
}

// Entry is one identifier. Its decayed hits lie in [Count-Error, Count].
type Entry struct {
	// Values are the request's values of the rule's key-only and wildcard
	// levels; Descriptor the whole descriptor, its fixed levels included.
	Values     []string `json:"values"`
	Descriptor []Pair   `json:"descriptor"`
	// Truncated: the identifier had more than 64 bytes (or a value of 255
	// or more); Values keep its first ones, Hash tells it apart.
	Truncated bool    `json:"truncated,omitempty"`
	Hash      string  `json:"hash"`
	Count     float64 `json:"count"`
	Error     float64 `json:"error"`
}

// Pair is a descriptor entry.
type Pair struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// String is the entry for a log line: its values and count.
func (e Entry) String() string {
	v := strings.Join(e.Values, ",")
	if e.Truncated {
		v += "..."
	}
	return v + " (" + strconv.FormatFloat(e.Count, 'f', -1, 64) + ")"
}

// Top returns, for the rules of domain (or only the rule of path), up
// to n identifiers by the ranking by (n <= 0: every one kept), the rules
// in path order. Rules without hits of that ranking are left out.
func (t *Tracker) Top(domain, path string, by By, n int) Answer {
	a := Answer{Window: t.o.Window.String(), Keys: t.o.Keys, Replicas: 1, Rules: []Ranking{}}
	tk := t.clock.Load()
	t.mu.Lock()
	var rs []*rule
	for _, r := range t.byPath {
		if r.domain == domain && (path == "" || r.path == path) {
			rs = append(rs, r)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(rs, func(a, b *rule) int { return strings.Compare(a.path, b.path) })
	for _, r := range rs {
		if rk := t.ranking(r, by, n, tk); len(rk.Entries) > 0 {
			a.Rules = append(a.Rules, rk)
		}
	}
	return a
}

// ranking returns up to n of r's identifiers by by, counts decayed to tk.
func (t *Tracker) ranking(r *rule, by By, n int, tk *tick) Ranking {
	rk := Ranking{Domain: r.domain, Rule: r.path, Source: r.source, By: string(by), Shadow: r.shadow, Entries: []Entry{}}
	s := r.hits.Load()
	if by == ByOverLimit {
		s = r.over.Load()
	}
	if s == nil {
		return rk
	}
	cs, unheld := s.snapshot(nil, tk.epoch, 1/tk.weight)
	slices.SortFunc(cs, func(a, b counter) int { return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.hash, b.hash)) })
	rk.Unlisted = round(unheld)
	if n > 0 && len(cs) > n {
		rk.Unlisted = round(max(unheld, cs[n].count))
		cs = cs[:n]
	}
	for _, c := range cs {
		vs := values(c.id[:c.idLen])
		rk.Entries = append(rk.Entries, Entry{Values: vs, Descriptor: r.descriptor(vs), Truncated: c.truncated,
			Hash: fmt.Sprintf("%016x", c.hash), Count: round(c.count), Error: round(c.err)})
	}
	return rk
}

// descriptor is the descriptor of r with vs as its variable values.
func (r *rule) descriptor(vs []string) []Pair {
	out := make([]Pair, 0, len(r.levels))
	for j, lv := range r.levels {
		p := Pair{Key: lv.Key, Value: lv.Value}
		if r.vars[j] {
			p.Value = ""
			if len(vs) > 0 {
				p.Value, vs = vs[0], vs[1:]
			}
		}
		out = append(out, p)
	}
	return out
}

// round keeps a count to a tenth.
func round(x float64) float64 { return math.Round(x*10) / 10 }

// Merge merges several replicas' answers to one query, as if one summary
// had seen all their decisions: an identifier's count and error are the
// sums of the replicas' that list it, plus, for each replica that does
// not, that replica's unlisted bound (so that the count stays an upper
// bound and count - error a lower one). Each rule keeps its n largest
// (n <= 0: all).
func Merge(answers []Answer, n int) Answer {
	out := Answer{Rules: []Ranking{}}
	type key struct{ domain, rule, by string }
	byRule := map[key][]*Ranking{}
	var order []key
	for i := range answers {
		a := &answers[i]
		out.Window, out.Keys = cmp.Or(out.Window, a.Window), max(out.Keys, a.Keys)
		out.Replicas += max(a.Replicas, 1)
		for j := range a.Rules {
			rk := &a.Rules[j]
			k := key{rk.Domain, rk.Rule, rk.By}
			if byRule[k] == nil {
				order = append(order, k)
			}
			byRule[k] = append(byRule[k], rk)
		}
	}
	slices.SortFunc(order, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.domain, b.domain), cmp.Compare(a.rule, b.rule), cmp.Compare(a.by, b.by))
	})
	for _, k := range order {
		out.Rules = append(out.Rules, mergeRule(byRule[k], n))
	}
	return out
}

// mergeRule merges one rule's rankings from several replicas.
func mergeRule(rks []*Ranking, n int) Ranking {
	m := *rks[0]
	m.Entries, m.Unlisted = nil, 0
	type acc struct {
		e    Entry
		seen []bool
	}
	byHash := map[string]*acc{}
	var hashes []string
	for i, rk := range rks {
		m.Unlisted += rk.Unlisted
		for _, e := range rk.Entries {
			a := byHash[e.Hash]
			if a == nil {
				a = &acc{e: e, seen: make([]bool, len(rks))}
				a.e.Count, a.e.Error = 0, 0
				byHash[e.Hash] = a
				hashes = append(hashes, e.Hash)
			}
			a.e.Count += e.Count
			a.e.Error += e.Error
			a.seen[i] = true
		}
	}
	for _, h := range hashes {
		a := byHash[h]
		for i, rk := range rks {
			if !a.seen[i] {
				a.e.Count += rk.Unlisted
				a.e.Error += rk.Unlisted
			}
		}
		a.e.Count, a.e.Error = round(a.e.Count), round(a.e.Error)
		m.Entries = append(m.Entries, a.e)
	}
	slices.SortFunc(m.Entries, func(a, b Entry) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Hash, b.Hash)) })
	if n > 0 && len(m.Entries) > n {
		m.Unlisted = max(m.Unlisted, m.Entries[n].Count)
		m.Entries = m.Entries[:n]
	}
	m.Unlisted = round(m.Unlisted)
	return m
}

// Limited returns the rules that have over-limit identifiers, up to n
// identifiers each, the rules with the largest first count first, at most
// max rules.
func (t *Tracker) Limited(n, maxRules int) []Ranking {
	tk := t.clock.Load()
	t.mu.Lock()
	rs := make([]*rule, 0, len(t.byPath))
	for _, r := range t.byPath {
		if r.over.Load() != nil {
			rs = append(rs, r)
		}
	}
	t.mu.Unlock()
	out := []Ranking{}
	for _, r := range rs {
		if rk := t.ranking(r, ByOverLimit, n, tk); len(rk.Entries) > 0 && rk.Entries[0].Count > 0 {
			out = append(out, rk)
		}
	}
	slices.SortFunc(out, func(a, b Ranking) int {
		return cmp.Or(cmp.Compare(b.Entries[0].Count, a.Entries[0].Count), cmp.Compare(a.Rule, b.Rule))
	})
	if len(out) > maxRules {
		out = out[:maxRules]
	}
	return out
}
