package server

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// adminStatus is the answer of /v1/status: what the admin page shows but the
// rules table.
type adminStatus struct {
	Version   string      `json:"version"`
	Time      time.Time   `json:"time"`
	Store     storeStatus `json:"store"`
	Rules     rulesStatus `json:"rules"`
	TopKeys   int         `json:"top_keys"` // 0: top identifiers are off
	TopWindow string      `json:"top_window"`
	// Limited are the rules with over-limit identifiers, most limited first.
	Limited []top.Ranking                `json:"limited"`
	RLQS    map[string]rlqs.DomainTotals `json:"rlqs,omitempty"`
	// Divisions are the first divisionsOnPage RLQS divisions, as
	// /v1/quota answers each; MoreDivisions counts those left out.
	Divisions     []rlqsDivision `json:"rlqs_divisions,omitempty"`
	MoreDivisions int            `json:"rlqs_more_divisions,omitempty"`
}

// rlqsDivision is an RLQS division on the page: its first clientsOnPage
// clients, those assigned the most, and how many it left out.
type rlqsDivision struct {
	rlqs.Usage
	MoreClients int `json:"more_clients,omitempty"`
}

// storeStatus is the store's state.
type storeStatus struct {
	Kind     string `json:"kind"` // memory or redis
	Name     string `json:"name"`
	Answered bool   `json:"answered"` // since the start
	Breaker  string `json:"breaker,omitempty"`
	// The embedded store's entries and refusals (--memory-max-keys).
	MemoryKeys    *int64 `json:"memory_keys,omitempty"`
	MemoryMaxKeys int    `json:"memory_max_keys,omitempty"`
	MemoryRefused *int64 `json:"memory_refused,omitempty"`
	// The over-limit cache's entries and hits (--over-limit-cache-bytes).
	CacheEntries *int    `json:"cache_entries,omitempty"`
	CacheHits    *uint64 `json:"cache_hits,omitempty"`
}

// rulesStatus is the rules in force and how their loads went.
type rulesStatus struct {
	Hash    string        `json:"hash"`
	From    string        `json:"from"` // file or xds
	Files   []string      `json:"files"`
	Domains int           `json:"domains"`
	Limits  int           `json:"limits"`
	Reload  *reloadStatus `json:"reload,omitempty"`
}

// limitedOnPage and topOnPage bound the page's top limited identifiers,
// divisionsOnPage and clientsOnPage its RLQS divisions.
const (
	limitedOnPage   = 20
	topOnPage       = 5
	divisionsOnPage = 100
	clientsOnPage   = 5
)

// handleStatus answers GET /v1/status.
func (s *Server) handleStatus(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.status()) }

func (s *Server) status() adminStatus {
	st := adminStatus{Version: s.version, Time: time.Now().UTC(), Store: s.storeStatus(), Limited: []top.Ranking{},
		TopKeys: s.opts.Admin.TopKeys, TopWindow: s.opts.Admin.TopWindow.String()}
	if cur := s.rules.Current(); cur != nil {
		st.Rules = rulesStatus{Hash: cur.Hash, From: "file", Files: cur.Files, Domains: len(cur.Set.Domains()), Limits: len(cur.Set.Limits())}
		if cur.FromXDS {
			st.Rules.From, st.Rules.Files = "xds", cur.Resources
		}
	}
	st.Rules.Reload = s.rules.status.Load()
	if s.top != nil {
		st.Limited = s.top.Limited(topOnPage, limitedOnPage)
	}
	if s.rlqs != nil {
		st.RLQS = s.rlqs.Totals()
		st.Divisions, st.MoreDivisions = pageDivisions(s.rlqs.Divisions(divisionsOnPage))
	}
	return st
}

// pageDivisions bounds divisions, of total, for the page: each keeps the
// clientsOnPage clients assigned the most.
func pageDivisions(divs []rlqs.Usage, total int) ([]rlqsDivision, int) {
	out := make([]rlqsDivision, len(divs))
	for i, u := range divs {
		cs := u.Clients
		sort.SliceStable(cs, func(a, b int) bool { return rate(cs[a].AssignedRate) > rate(cs[b].AssignedRate) })
		out[i] = rlqsDivision{Usage: u, MoreClients: max(len(cs)-clientsOnPage, 0)}
		out[i].Clients = cs[:min(len(cs), clientsOnPage)]
	}
	return out, total - len(divs)
}

// rate is an optional rate, 0 when unknown.
func rate(r *float64) float64 {
	if r == nil {
		return 0
	}
	return *r
}

func (s *Server) storeStatus() storeStatus {
	st := storeStatus{Kind: storeKind(s.opts), Name: storeName(s.opts), Answered: s.storeSeen.Load()}
	switch g := s.store.(type) {
	case *store.Memory:
		ms := g.Stats()
		st.MemoryKeys, st.MemoryRefused, st.MemoryMaxKeys = &ms.Keys, &ms.Refused, s.opts.MemoryMaxKeys
	case *guarded:
		st.Breaker = g.breaker.State().String()
		if g.cache != nil {
			cs := g.cache.Stats()
			st.CacheEntries, st.CacheHits = &cs.Entries, &cs.Hits
		}
	}
	return st
}

// ruleRow is one rule of /v1/status/rules.
type ruleRow struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Source string `json:"source"`
	Limit  string `json:"limit"`
	Shadow bool   `json:"shadow_mode,omitempty"`
	// Hits and OverLimit are the process's counters since its start.
	Hits      float64 `json:"hits"`
	OverLimit float64 `json:"over_limit"`
}

// rulesPage is the answer of /v1/status/rules.
type rulesPage struct {
	Total  int       `json:"total"` // rules matching q
	Offset int       `json:"offset"`
	Rules  []ruleRow `json:"rules"`
}

// Bounds of a rules page.
const (
	defaultRulesPage = 50
	maxRulesPage     = 1000
)

// handleStatusRules answers GET /v1/status/rules?[q=filter][&offset=N]
// [&limit=N]: the rules whose path or source holds q (any case), in the
// rules' order, with their counters.
func (s *Server) handleStatusRules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err1 := atoiOr(q.Get("offset"), 0)
	limit, err2 := atoiOr(q.Get("limit"), defaultRulesPage)
	if err1 != nil || err2 != nil || offset < 0 || limit < 1 || limit > maxRulesPage {
		http.Error(w, "offset must be 0 or more, limit from 1 to 1000", http.StatusBadRequest)
		return
	}
	writeJSON(w, s.rulesPage(q.Get("q"), offset, limit))
}

func atoiOr(v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	return strconv.Atoi(v)
}

func (s *Server) rulesPage(filter string, offset, limit int) rulesPage {
	page := rulesPage{Offset: offset, Rules: []ruleRow{}}
	cur := s.rules.Current()
	if cur == nil {
		return page
	}
	filter = strings.ToLower(filter)
	counts := s.ruleCounts()
	for _, l := range cur.Set.Limits() {
		if filter != "" && !strings.Contains(strings.ToLower(l.Path+" "+l.Source), filter) {
			continue
		}
		if page.Total >= offset && len(page.Rules) < limit {
			d := top.DomainOf(l)
			c := counts[d+"\x00"+l.Path]
			page.Rules = append(page.Rules, ruleRow{Domain: d, Rule: l.Path, Source: l.Source,
				Limit: strings.TrimPrefix(l.String(), l.Path+": "), Shadow: l.ShadowMode, Hits: c.hits, OverLimit: c.over})
		}
		page.Total++
	}
	return page
}

// ruleCount is a rule's hits and over-limit hits.
type ruleCount struct{ hits, over float64 }

// ruleCounts reads the rule counters from the registry, at most once a
// second, by domain and rule.
func (s *Server) ruleCounts() map[string]ruleCount {
	s.counts.mu.Lock()
	defer s.counts.mu.Unlock()
	if time.Since(s.counts.at) < time.Second && s.counts.m != nil {
		return s.counts.m
	}
	m := map[string]ruleCount{}
	families, _ := s.registry.Gather()
	for _, f := range families {
		over := f.GetName() == "fastlimit_rule_over_limit_total"
		if !over && f.GetName() != "fastlimit_rule_total_hits_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var domain, rule string
			for _, lp := range mt.GetLabel() {
				switch lp.GetName() {
				case "domain":
					domain = lp.GetValue()
				case "rule":
					rule = lp.GetValue()
				}
			}
			k := domain + "\x00" + rule
			c := m[k]
			if over {
				c.over += mt.GetCounter().GetValue()
			} else {
				c.hits += mt.GetCounter().GetValue()
			}
			m[k] = c
		}
	}
	s.counts.m, s.counts.at = m, time.Now()
	return m
}

// countsCache holds the last ruleCounts.
type countsCache struct {
	mu sync.Mutex
	at time.Time
	m  map[string]ruleCount
}
