package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
)

// handleExplain answers POST /v1/explain: for a RateLimitRequest as POST
// /json takes it, what each descriptor matched and the code the request
// would get now, charging nothing (limiter.Peek); for {"domain": D,
// "bucket": {k: v}}, the RLQS bucket's rule and division.
func (a *API) handleExplain(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var bucket struct {
		Domain string            `json:"domain"`
		Bucket map[string]string `json:"bucket"`
	}
	if json.Unmarshal(body, &bucket) == nil && bucket.Bucket != nil {
		if err := a.checkSize(1, func(int) int { return len(bucket.Bucket) }); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.explainBucket(w, r, bucket.Domain, bucket.Bucket)
		return
	}
	req, err := rls.ParseRequest(body)
	if err == nil {
		err = a.checkSize(len(req.Descriptors), func(i int) int { return len(req.Descriptors[i].Entries) })
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rs := a.o.Limiter.Rules()
	if rs == nil {
		storeError(w, limiter.ErrNoRules)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	p, err := limiter.Peek(ctx, a.o.Limiter, req)
	if err != nil {
		storeError(w, err)
		return
	}
	out := Explanation{Domain: req.Domain, Code: p.Code.String(), Store: a.o.Store().Kind, Descriptors: make([]Explained, len(p.Statuses))}
	if rs.Domain(req.Domain) == nil {
		out.UnknownDomain, out.Domains = true, rs.Domains()
	}
	now := time.Now().UnixMilli()
	for i := range p.Statuses {
		out.Descriptors[i] = a.explain(req.Domain, req.Descriptors[i].Entries, p, i, now)
	}
	writeJSON(w, out)
}

// explain describes the peeked status of descriptor i of p, and of a
// rule with several limits each of them.
func (a *API) explain(domain string, entries []descriptors.Entry, p *limiter.Peeked, i int, now int64) Explained {
	st := &p.Statuses[i]
	e := Explained{Entries: toEntries(entries), Code: st.Code.String(), Replaced: st.Replaced, Hits: st.Hits,
		Refund: st.Refund, Quota: st.Quota, Shadowed: st.Shadowed}
	lim := st.Limit
	if lim == nil {
		return e
	}
	e.Matched, e.Rule = true, a.ruleInfo(domain, lim)
	if lim.Unlimited || p.Keys[i] == "" {
		return e
	}
	e.State = limitState(st, p.Keys[i], now)
	if st.Parts == nil {
		return e
	}
	// Each limit of the rule, in its order: those in force are the Parts,
	// in the same order; the others were replaced.
	next := 0
	for _, m := range lim.Joint {
		l := ExplainedLimit{Label: m.Label(), Name: m.Name, Replaces: m.Replaces, Spec: limitSpec(m)}
		if next < len(st.Parts) && st.Parts[next].Limit == m {
			part := &st.Parts[next]
			l.Decides, l.Code, l.Shadowed = m == lim, part.Code.String(), part.Shadowed
			l.State = limitState(part, p.PartKeys[i][next], now)
			next++
		} else {
			l.Replaced = true
		}
		e.Limits = append(e.Limits, l)
	}
	return e
}

// limitState is the state of st's limit, a limited one whose base key is
// key: its store keys and what is left before the charge.
func limitState(st *limiter.Status, key string, now int64) State {
	lim := st.Limit
	e := State{Keys: storeKeys(key, lim, now)}
	remaining, reset := st.Remaining, st.ResetMillis
	e.ResetMs = &reset
	if st.Code == limiter.OverLimit || st.Shadowed {
		retry := st.RetryAfterMillis
		e.RetryAfterMs = &retry
	}
	if lim.Algorithm == descriptors.TokenBucket {
		e.Tokens = &remaining
		return e
	}
	count := max(int64(lim.RequestsPerUnit)-int64(remaining), 0)
	e.Count, e.Remaining = &count, &remaining
	return e
}

// ruleInfo describes lim, a limit of domain.
func (a *API) ruleInfo(domain string, lim *descriptors.Limit) *Rule {
	ri := &Rule{Domain: domain, Path: lim.Path, Source: lim.Source, From: "file", Name: lim.Name,
		Unlimited: lim.Unlimited, ShadowMode: lim.ShadowMode, QuotaMode: lim.QuotaMode, Replaces: lim.Replaces,
		Levels: make([]Entry, len(lim.Levels))}
	for i, lv := range lim.Levels {
		ri.Levels[i] = Entry{Key: lv.Key, Value: lv.Value}
	}
	switch cur := a.o.Rules.Current(); {
	case lim.Levels == nil:
		ri.Source, ri.From = "request", "request"
	case cur != nil && cur.FromXDS:
		ri.From = "xds"
	}
	ri.Spec = limitSpec(lim)
	return ri
}

// limitSpec is lim's size; nothing for an unlimited one.
func limitSpec(lim *descriptors.Limit) Spec {
	if lim.Unlimited {
		return Spec{}
	}
	sp := Spec{Algorithm: lim.Algorithm.String(), Unit: lim.Unit.String(), RequestsPerUnit: lim.RequestsPerUnit,
		UnitMultiplier: max(lim.UnitMultiplier, 1), Cost: float64(lim.Cost) / descriptors.Milli}
	if lim.Algorithm == descriptors.TokenBucket {
		burst := float64(lim.Burst) / descriptors.Milli
		sp.Burst = &burst
	}
	return sp
}

// storeKeys are the keys under base that lim's state lives in at now
// (Unix ms): a window's counter (and a sliding window's previous one),
// a bucket's state.
func storeKeys(base string, lim *descriptors.Limit, now int64) []string {
	w := lim.WindowMillis()
	ws, prev := now-now%w, now-now%w-w
	if c := lim.Periods(); c != nil { // a calendar's windows
		ws, _ = c.Period(now)
		prev, _ = c.Period(ws - 1)
	}
	switch lim.Algorithm {
	case descriptors.TokenBucket:
		return []string{base + "tokens"}
	case descriptors.SlidingWindow:
		return []string{base + strconv.FormatInt(ws/1000, 10), base + strconv.FormatInt(prev/1000, 10)}
	}
	return []string{base + strconv.FormatInt(ws/1000, 10)}
}

// explainBucket answers an RLQS bucket's explanation; 404 with --rlqs=false
// or --rlqs-process.
func (a *API) explainBucket(w http.ResponseWriter, r *http.Request, domain string, id map[string]string) {
	if a.o.RLQS == nil {
		a.rlqsNotHere(w)
		return
	}
	if domain == "" {
		http.Error(w, "domain is required", http.StatusBadRequest)
		return
	}
	u := a.o.RLQS.Usage(domain, id)
	out := BucketExplanation{Domain: domain, Bucket: id, Division: u}
	if u.Matched {
		for _, l := range a.o.Limiter.Rules().Limits() {
			if l.Path == u.Rule {
				out.Rule = a.ruleInfo(domain, l)
				break
			}
		}
	}
	writeJSON(w, out)
}

func toEntries(entries []descriptors.Entry) []Entry {
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = Entry(e)
	}
	return out
}
