package admin

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// maxTopN bounds the n of /v1/top.
const maxTopN = 10_000

// handleTop answers GET /v1/top?[domain=D][&rule=R][&by=over_limit|hits]
// [&n=N] with this replica's top identifiers of each rule of D (of every
// domain without one; or of rule R alone), by over-limit hits (the
// default) or hits, n of each (default 10; 0: every one kept), as a
// top.Answer. A domain or rule the rules in force lack is 404, naming
// those they have; --top-keys 0 is 404 too.
func (a *API) handleTop(w http.ResponseWriter, r *http.Request) {
	if a.o.Top == nil {
		http.Error(w, "top identifiers are not kept: --top-keys is 0", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	by, err := top.ParseBy(q.Get("by"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n := 10
	if v := q.Get("n"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 0 || n > maxTopN {
			http.Error(w, "n must be a whole number from 0 (all kept) to 10000", http.StatusBadRequest)
			return
		}
	}
	domain, rule := q.Get("domain"), q.Get("rule")
	rs := a.o.Limiter.Rules()
	if rs == nil {
		http.Error(w, "no rules loaded", http.StatusServiceUnavailable)
		return
	}
	if err := knownRule(rs, domain, rule); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	out := a.o.Top.Top(domain, rule, by, n) // of no domain: its frame alone
	if domain == "" {
		for _, d := range rs.Domains() {
			out.Rules = append(out.Rules, a.o.Top.Top(d, rule, by, n).Rules...)
		}
	}
	writeJSON(w, out)
}

// knownRule says what of domain and rule (either may be "") the rules
// in force lack, naming what they have.
func knownRule(rs *descriptors.Set, domain, rule string) error {
	if domain != "" && rs.Domain(domain) == nil {
		return unknownDomain(rs, domain)
	}
	if rule == "" {
		return nil
	}
	for _, l := range rs.Limits() {
		if l.Path == rule && (domain == "" || top.DomainOf(l) == domain) {
			return nil
		}
	}
	if domain != "" {
		return fmt.Errorf("no rule %s in domain %s: /v1/rules lists the rules in force", quoted(rule), domain)
	}
	return fmt.Errorf("no rule %s in the rules in force: /v1/rules lists them", quoted(rule))
}

// unknownDomain is the error of a domain the rules in force lack.
func unknownDomain(rs *descriptors.Set, domain string) error {
	return fmt.Errorf("no domain %s in the rules in force; their domains: %s", quoted(domain), domainList(rs))
}

// domainList is the domains of rs for a message, at most 20.
func domainList(rs *descriptors.Set) string {
	ds := rs.Domains()
	if len(ds) == 0 {
		return "(none)"
	}
	if len(ds) > 20 {
		return strings.Join(ds[:20], ", ") + fmt.Sprintf(" and %d more", len(ds)-20)
	}
	return strings.Join(ds, ", ")
}
