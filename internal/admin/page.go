package admin

import (
	"crypto/rand"
	_ "embed"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/observe/top"
)

// pageRefresh is how often the admin page polls /v1/status.
const pageRefresh = 2 * time.Second

//go:embed page.html
var pageHTML string

// page is the admin page: the state at its rendering, which its script
// then refreshes from /v1/status and /v1/status/rules. It loads nothing
// from elsewhere.
var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"deref": func(p *int64) int64 { return *p },
	"short": func(h string) string { return h[:min(len(h), 12)] },
	"share": func(over, hits float64) string {
		if hits == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f %%", 100*over/hits)
	},
	"values": func(e top.Entry) string {
		v := strings.Join(e.Values, ", ")
		if len(e.Values) == 0 {
			v = "(the rule's only counter)"
		}
		if e.Truncated {
			v += "…"
		}
		return v
	},
	"add": func(a, b int) int { return a + b },
	"rate": func(r *float64) string {
		if r == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f", *r)
	},
	"bucket": func(id map[string]string) string {
		kv := make([]string, 0, len(id))
		for _, k := range slices.Sorted(maps.Keys(id)) {
			kv = append(kv, k+"="+id[k])
		}
		return strings.Join(kv, ", ")
	},
	"reload": func(r *ReloadStatus) string {
		switch {
		case r == nil:
			return "ok (no reload since the start)"
		case r.Failing:
			return "last reload failed at " + r.ErrorAt.Format(time.TimeOnly) + ": " + strings.Join(r.Errors, "; ")
		case !r.ErrorAt.IsZero():
			return "ok (a reload failed at " + r.ErrorAt.Format(time.TimeOnly) + ")"
		}
		return "ok"
	},
}).Parse(pageHTML))

// pageData is what the page renders.
type pageData struct {
	Status    Status
	Rules     RulesPage
	Filter    string
	Range     string
	PageSize  int
	RefreshMs int64
	// The bounds of the RLQS divisions shown.
	DivisionsOnPage, ClientsOnPage int
	// Nonce lets the page's own script and style run, and nothing else.
	Nonce string
}

// home serves "/" and the paths nothing else serves: the admin page
// (page) to a browser asking for "/" (Accept: text/html), the plain-text
// index of endpoints to every other request, as the reference's debug
// listener.
func (a *API) home(idx index, page http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" || !strings.Contains(r.Header.Get("Accept"), "text/html") {
			idx.ServeHTTP(w, r)
			return
		}
		page.ServeHTTP(w, r)
	})
}

// handlePage renders the admin page.
func (a *API) handlePage(w http.ResponseWriter, r *http.Request) {
	filter := r.URL.Query().Get("q")
	d := pageData{Status: a.status(), Rules: a.rulesPage(filter, 0, defaultRulesPage), Filter: filter,
		PageSize: defaultRulesPage, RefreshMs: pageRefresh.Milliseconds(), DivisionsOnPage: divisionsOnPage, ClientsOnPage: clientsOnPage}
	d.Range = fmt.Sprintf("%d–%d of %d", min(1, d.Rules.Total), len(d.Rules.Rules), d.Rules.Total)
	d.Nonce = rand.Text()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The page's script and style by nonce alone: a value that escaped
	// the template's escaping would still run nothing. It fetches its
	// own JSON, and no page may frame it (clickjacking).
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+d.Nonce+"'; style-src 'nonce-"+d.Nonce+"'; "+
		"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if err := page.Execute(w, d); err != nil {
		a.log.Debug("admin page", zap.Error(err))
	}
}
