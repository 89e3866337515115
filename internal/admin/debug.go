package admin

import (
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// handleRLConfig writes the rules in force in the reference's /rlconfig
// layout, one line per limit,
//
//	domain.key_value.key: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false
//
// (an unlimited rule reads unit=UNKNOWN requests_per_unit=0; a rule with
// several limits has a line for each, by its Label), in the rules' order
// where the reference's follows Go's map order. Before any
// rules the body is empty, as the reference's.
func (a *API) handleRLConfig(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	cur := a.o.Rules.Current()
	if cur == nil {
		return
	}
	var b strings.Builder
	for _, l := range cur.Set.Limits() {
		unit, rpu := l.Unit.String(), l.RequestsPerUnit
		if l.Unlimited {
			unit, rpu = descriptors.UnitUnknown.String(), 0
		}
		fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
			l.Label(), unit, rpu, l.ShadowMode, l.QuotaMode)
	}
	_, _ = io.WriteString(w, b.String())
}

// handleStats writes what the reference's /stats writes, its process's
// published expvars ("cmdline: [...]", "memstats: {...}"), one
// "<name>: <value>" line each, the command line's secrets masked
// (settings.MaskArgs), and, when the reference's stats are on, a
// "ratelimit: {...}" line of their counters by stat name.
func (a *API) handleStats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	expvar.Do(func(kv expvar.KeyValue) {
		v := kv.Value.String()
		if kv.Key == "cmdline" {
			j, _ := json.Marshal(settings.MaskArgs(a.o.Args))
			v = string(j)
		}
		b.WriteString(kv.Key + ": " + v + "\n")
	})
	if st := a.o.RefStats; st != nil {
		counters := map[string]uint64{}
		for _, c := range st.Counters() {
			counters[c.Name()] = c.Value()
		}
		if j, err := json.Marshal(counters); err == nil {
			b.WriteString("ratelimit: " + string(j) + "\n")
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// handleCmdline is pprof.Cmdline with the secrets masked
// (settings.MaskArgs): the arguments separated by NUL bytes.
func (a *API) handleCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, strings.Join(settings.MaskArgs(a.o.Args), "\x00"))
}

// handleRules writes the rules in force with FastLimit's fields: a header
// of comment lines (hash, files or xDS resources, the last failed reload's
// time and errors if a reload failed), then one line per limit. Before any
// rules it answers 503.
func (a *API) handleRules(w http.ResponseWriter, _ *http.Request) {
	cur := a.o.Rules.Current()
	if cur == nil {
		http.Error(w, "no rules loaded", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	kind, names := "file", cur.Files
	if cur.FromXDS {
		kind, names = "xds resource", cur.Resources
	}
	_, _ = fmt.Fprintf(w, "# hash %s\n# %d %ss, %d domains, %d limits\n",
		cur.Hash, len(names), kind, len(cur.Set.Domains()), len(cur.Set.Limits()))
	for _, f := range names {
		_, _ = fmt.Fprintf(w, "# %s %s\n", kind, f)
	}
	if cur.Overlay != "" {
		_, _ = fmt.Fprintf(w, "# rules overlay %s\n", cur.Overlay)
	}
	for _, wn := range cur.Warnings {
		_, _ = fmt.Fprintf(w, "# warning: %s\n", strings.ReplaceAll(wn.Error(), "\n", " "))
	}
	if st := a.o.Rules.Reload(); st != nil && len(st.Errors) > 0 {
		state := "the rules below, of an earlier load, are in force"
		if !st.Failing {
			state = "rules loaded since, last at " + st.At.UTC().Format(time.RFC3339)
		}
		_, _ = fmt.Fprintf(w, "# last failed reload at %s (%s):\n", st.ErrorAt.UTC().Format(time.RFC3339), state)
		for _, e := range st.Errors {
			_, _ = fmt.Fprintf(w, "#   %s\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
	_ = cur.Set.Dump(w)
}
