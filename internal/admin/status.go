package admin

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// limitedOnPage and topOnPage bound the page's top limited identifiers,
// divisionsOnPage and clientsOnPage its RLQS divisions.
const (
	limitedOnPage   = 20
	topOnPage       = 5
	divisionsOnPage = 100
	clientsOnPage   = 5
)

// handleStatus answers GET /v1/status.
func (a *API) handleStatus(w http.ResponseWriter, _ *http.Request) { writeJSON(w, a.status()) }

func (a *API) status() Status {
	o := a.o.Settings.Admin
	st := Status{Version: a.o.Version, Time: time.Now().UTC(), Store: a.o.Store(), Limited: []top.Ranking{},
		TopKeys: o.TopKeys, TopWindow: o.TopWindow.String()}
	if cur := a.o.Rules.Current(); cur != nil {
		st.Rules = RulesStatus{Hash: cur.Hash, From: "file", Files: cur.Files, Domains: len(cur.Set.Domains()), Limits: len(cur.Set.Limits())}
		if cur.FromXDS {
			st.Rules.From, st.Rules.Files = "xds", cur.Resources
		}
	}
	st.Rules.Reload = a.o.Rules.Reload()
	if a.o.Top != nil {
		st.Limited = a.o.Top.Limited(topOnPage, limitedOnPage)
	}
	if a.o.RLQS != nil {
		st.RLQS = a.o.RLQS.Totals()
		st.Divisions, st.MoreDivisions = pageDivisions(a.o.RLQS.Divisions(divisionsOnPage))
	}
	return st
}

// pageDivisions bounds divisions, of total, for the page: each keeps the
// clientsOnPage clients assigned the most.
func pageDivisions(divs []rlqs.Usage, total int) ([]RLQSDivision, int) {
	out := make([]RLQSDivision, len(divs))
	for i, u := range divs {
		cs := u.Clients
		sort.SliceStable(cs, func(a, b int) bool { return rate(cs[a].AssignedRate) > rate(cs[b].AssignedRate) })
		out[i] = RLQSDivision{Usage: u, MoreClients: max(len(cs)-clientsOnPage, 0)}
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

// Bounds of a rules page.
const (
	defaultRulesPage = 50
	maxRulesPage     = 1000
)

// handleStatusRules answers GET /v1/status/rules?[q=filter][&offset=N]
// [&limit=N]: the rules whose path or source holds q (any case), in the
// rules' order, with their counters.
func (a *API) handleStatusRules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err1 := atoiOr(q.Get("offset"), 0)
	limit, err2 := atoiOr(q.Get("limit"), defaultRulesPage)
	if err1 != nil || err2 != nil || offset < 0 || limit < 1 || limit > maxRulesPage {
		http.Error(w, "offset must be 0 or more, limit from 1 to 1000", http.StatusBadRequest)
		return
	}
	writeJSON(w, a.rulesPage(q.Get("q"), offset, limit))
}

func atoiOr(v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	return strconv.Atoi(v)
}

func (a *API) rulesPage(filter string, offset, limit int) RulesPage {
	page := RulesPage{Offset: offset, Rules: []RuleRow{}}
	cur := a.o.Rules.Current()
	if cur == nil {
		return page
	}
	filter = strings.ToLower(filter)
	counts := a.ruleCounts()
	for _, l := range cur.Set.Limits() {
		if filter != "" && !strings.Contains(strings.ToLower(l.Path+" "+l.Source), filter) {
			continue
		}
		if page.Total >= offset && len(page.Rules) < limit {
			d := top.DomainOf(l)
			c := counts[d+"\x00"+l.Path]
			page.Rules = append(page.Rules, RuleRow{Domain: d, Rule: l.Path, Source: l.Source,
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
func (a *API) ruleCounts() map[string]ruleCount {
	a.counts.mu.Lock()
	defer a.counts.mu.Unlock()
	if time.Since(a.counts.at) < time.Second && a.counts.m != nil {
		return a.counts.m
	}
	m := map[string]ruleCount{}
	families, _ := a.o.Registry.Gather()
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
	a.counts.m, a.counts.at = m, time.Now()
	return m
}

// countsCache holds the last ruleCounts.
type countsCache struct {
	mu sync.Mutex
	at time.Time
	m  map[string]ruleCount
}
