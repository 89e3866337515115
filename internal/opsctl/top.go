package opsctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/observe/top"
)

// runTop is "fastlimit top": every replica's top identifiers, merged
// (top.Merge): each is asked for all it keeps, the merge keeps -n.
func runTop(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o := struct {
		common
		domain, rule, by string
		n                int
	}{}
	fs := newFlags("top", "[--domain D] [--rule R] [--by over_limit|hits] [-n N] [--admin A,B,...] [--json]", &o.common, getenv, stderr)
	fs.StringVar(&o.domain, "domain", "", "domain whose rules to rank (default: every domain)")
	fs.StringVar(&o.rule, "rule", "", "only the rule of this path, e.g. edge.remote_address")
	fs.StringVar(&o.by, "by", "over_limit", "rank by over_limit hits or by hits")
	fs.IntVar(&o.n, "n", 10, "identifiers per rule (0: all kept)")
	if err := parse(fs, args); err != nil {
		return exit(err, stderr)
	}
	if _, err := top.ParseBy(o.by); err != nil {
		return exit(fmt.Errorf("%w: --by: %w", errUsage, err), stderr)
	}
	if o.n < 0 {
		return exit(fmt.Errorf("%w: -n %d: give 0 (all kept) or more", errUsage, o.n), stderr)
	}
	cl, err := newClient(o.common, stderr)
	if err != nil {
		return exit(err, stderr)
	}
	q := url.Values{"by": {o.by}, "n": {"0"}}
	if o.domain != "" {
		q.Set("domain", o.domain)
	}
	if o.rule != "" {
		q.Set("rule", o.rule)
	}
	answers, _, err := each(cl, func(ctx context.Context, base string) (top.Answer, error) {
		var a top.Answer
		return a, cl.do(ctx, base, http.MethodGet, "/v1/top?"+q.Encode(), nil, &a)
	})
	if len(answers) == 0 {
		return exit(err, stderr)
	}
	m := top.Merge(answers, o.n)
	if o.json {
		_ = printJSON(stdout, m)
	} else {
		printTop(stdout, m)
	}
	return exit(err, stderr) // some replicas may have failed
}

// printTop writes a merged answer as a table, one identifier a line,
// what clients chose escaped (term).
func printTop(w io.Writer, a top.Answer) {
	fmt.Fprintf(w, "%s, counts decayed over %s (true count within [count-error, count])\n", replicas(a.Replicas), a.Window)
	if len(a.Rules) == 0 {
		fmt.Fprintln(w, "no identifier counted")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tBY\tIDENTIFIER\tCOUNT\tERROR\tDESCRIPTOR")
	for _, rk := range a.Rules {
		for _, e := range rk.Entries {
			vs := make([]string, len(e.Values))
			for i, v := range e.Values {
				vs[i] = term(v)
			}
			id := strings.Join(vs, ",")
			if e.Truncated {
				id += "..."
			}
			d := make([]admin.Entry, len(e.Descriptor))
			for i, p := range e.Descriptor {
				d[i] = admin.Entry(p)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", term(rk.Rule), term(rk.By), id, num(e.Count), num(e.Error), query(d))
		}
		if rk.Unlisted > 0 {
			fmt.Fprintf(tw, "%s\t%s\t(any other)\t<= %s\t\t\n", term(rk.Rule), term(rk.By), num(rk.Unlisted))
		}
	}
	_ = tw.Flush()
}

// replicas is "1 replica", "3 replicas".
func replicas(n int) string {
	if n == 1 {
		return "1 replica"
	}
	return strconv.Itoa(n) + " replicas"
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
