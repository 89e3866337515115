package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// The actions of the counters writes.
const (
	actionReset  = "reset"
	actionRefund = "refund"
)

func (a *API) handleReset(w http.ResponseWriter, r *http.Request) { a.writeCounters(w, r, actionReset) }
func (a *API) handleRefund(w http.ResponseWriter, r *http.Request) {
	a.writeCounters(w, r, actionRefund)
}

// writeCounters applies and audits a counters write, authorized already
// (guard): a reset clears every descriptor's state on the store
// (limiter.Reset), a refund gives hits back as is_negative_hits does.
// Each write is one audit line naming who, from where, what, and the
// counts before and after.
func (a *API) writeCounters(w http.ResponseWriter, r *http.Request, action string) {
	who, err := a.auth.who(r)
	if err != nil { // the token file changed since the guard's check
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	raw, ok := readBody(w, r)
	if !ok {
		return
	}
	var body CountersBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return
	}
	rs := a.o.Limiter.Rules()
	if rs == nil {
		storeError(w, limiter.ErrNoRules)
		return
	}
	req, err := countersRequest(rs, &body, action == actionRefund)
	if err == nil {
		err = a.checkSize(len(req.Descriptors), func(i int) int { return len(req.Descriptors[i].Entries) })
	}
	if err == nil && len(body.Values) > maxEntries {
		err = fmt.Errorf("%d values: a rule has at most %d levels here", len(body.Values), maxEntries)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.applyCounters(ctx, req, action, body.Hits)
	if errors.Is(err, errNoLimit) {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if err != nil {
		a.audit.log.Warn("admin write failed", zap.String(logAction, action), zap.String(logRemote, r.RemoteAddr),
			zap.String(logWho, who), zap.String(logDomain, quoted(req.Domain)), zap.Error(err))
		storeError(w, err)
		return
	}
	out.Who = who
	a.audit.wrote(r, who, action, out, body.Hits)
	writeJSON(w, out)
}

// errNoLimit answers a write whose descriptors match no limited rule.
var errNoLimit = errors.New("no descriptor matches a rule with a limit: nothing to change")

// applyCounters peeks at req, writes, and peeks again.
func (a *API) applyCounters(ctx context.Context, req *limiter.Request[descriptors.Entry], action string, hits uint64) (*CountersAnswer, error) {
	before, err := limiter.Peek(ctx, a.o.Limiter, req)
	if err != nil {
		return nil, err
	}
	if !anyKey(before.Keys) {
		return nil, errNoLimit
	}
	if action == actionRefund {
		give := *req
		give.Descriptors = append([]limiter.Descriptor[descriptors.Entry](nil), req.Descriptors...)
		for i := range give.Descriptors {
			d := &give.Descriptors[i]
			d.Hits, d.HasHits, d.Refund = hits, true, true
		}
		_, err = limiter.Check(ctx, a.o.Limiter, &give)
	} else {
		_, err = limiter.Reset(ctx, a.o.Limiter, a.o.Resetter, req)
	}
	if err != nil {
		return nil, err
	}
	after, err := limiter.Peek(ctx, a.o.Limiter, req)
	if err != nil {
		return nil, err
	}
	out := &CountersAnswer{Action: action, Domain: req.Domain, Descriptors: make([]CountersChange, len(req.Descriptors))}
	now := time.Now().UnixMilli()
	for i := range req.Descriptors {
		es := req.Descriptors[i].Entries
		out.Descriptors[i] = CountersChange{
			Before: a.explain(req.Domain, es, before, i, now),
			After:  a.explain(req.Domain, es, after, i, now),
		}
	}
	return out, nil
}

// countersRequest builds the request of a counters body: its descriptors
// with 0 hits (peeks), each a refund of body.Hits if refund.
func countersRequest(rs *descriptors.Set, body *CountersBody, refund bool) (*limiter.Request[descriptors.Entry], error) {
	switch {
	case body.Domain == "":
		return nil, errors.New("domain is required")
	case refund && body.Hits == 0:
		return nil, errors.New("hits is required: how many hits to give back")
	case !refund && body.Hits != 0:
		return nil, errors.New("hits is for refunds: a reset clears the whole state")
	case (body.Rule == "") == (len(body.Descriptors) == 0):
		return nil, errors.New("give descriptors, or a rule and its values")
	}
	req := &limiter.Request[descriptors.Entry]{Domain: body.Domain}
	if body.Rule != "" {
		entries, err := ruleEntries(rs, body.Domain, body.Rule, body.Values)
		if err != nil {
			return nil, err
		}
		req.Descriptors = []limiter.Descriptor[descriptors.Entry]{{Entries: entries, HasHits: true}}
		return req, nil
	}
	for _, d := range body.Descriptors {
		es := make([]descriptors.Entry, len(d.Entries))
		for i, e := range d.Entries {
			es[i] = descriptors.Entry(e)
		}
		req.Descriptors = append(req.Descriptors, limiter.Descriptor[descriptors.Entry]{Entries: es, HasHits: true})
	}
	return req, nil
}

// ruleEntries builds the entries of the rule of path in domain, the
// values of its key-only and wildcard levels taken from values in order.
func ruleEntries(rs *descriptors.Set, domain, path string, values []string) ([]descriptors.Entry, error) {
	d := rs.Domain(domain)
	if d == nil {
		return nil, fmt.Errorf("no domain %q in the rules in force", domain)
	}
	for _, l := range rs.Limits() {
		if l.Path != path {
			continue
		}
		var es []descriptors.Entry
		vs := values
		for _, lv := range l.Levels {
			v := lv.Value
			if v == "" || descriptors.IsWildcard(v) {
				if len(vs) == 0 {
					return nil, fmt.Errorf("rule %s needs a value for %s: give one value per key-only or wildcard level", path, lv.Key)
				}
				v, vs = vs[0], vs[1:]
			}
			es = append(es, descriptors.Entry{Key: lv.Key, Value: v})
		}
		if len(vs) > 0 {
			return nil, fmt.Errorf("rule %s takes %d values, not %d", path, len(values)-len(vs), len(values))
		}
		if descriptors.Match(d, es) != l {
			return nil, fmt.Errorf("the values %q do not match rule %s of domain %s", values, path, domain)
		}
		return es, nil
	}
	return nil, fmt.Errorf("no rule %s in domain %s", path, domain)
}

func anyKey(keys []string) bool {
	for _, k := range keys {
		if k != "" {
			return true
		}
	}
	return false
}
