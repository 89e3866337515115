package admin

import (
	"net/http"
	"strconv"

	"github.com/fastlimit/fastlimit/internal/observe/top"
)

// maxTopN bounds the n of /v1/top.
const maxTopN = 10_000

// handleTop answers GET /v1/top?domain=D[&rule=R][&by=over_limit|hits][&n=N]
// with this replica's top identifiers of each rule of D (or of rule R), by
// over-limit hits (the default) or hits, n of each (default 10; 0: every
// one kept), as a top.Answer; 404 with --top-keys 0.
func (a *API) handleTop(w http.ResponseWriter, r *http.Request) {
	if a.o.Top == nil {
		http.Error(w, "top identifiers are not kept: --top-keys is 0", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	domain := q.Get("domain")
	if domain == "" {
		http.Error(w, "domain is required: /v1/top?domain=D[&rule=R][&by=over_limit|hits][&n=N]", http.StatusBadRequest)
		return
	}
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
	writeJSON(w, a.o.Top.Top(domain, q.Get("rule"), by, n))
}
