package opsctl

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"text/tabwriter"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// runUsage is "fastlimit usage": a descriptor's state on every replica
// (one line each: they agree on a shared Redis), or an RLQS bucket's
// division, the replicas' Envoys merged.
func runUsage(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var c common
	var domain, desc, bucket string
	fs := newFlags("usage", "--domain D (--descriptor k=v[,k2=v2] | --bucket k=v[,k2=v2]) [--admin A,B,...] [--json]", &c, getenv, stderr)
	fs.StringVar(&domain, "domain", "", "the descriptor's domain (required)")
	fs.StringVar(&desc, "descriptor", "", "the descriptor, key=value,key2=value2 (percent-encode ',' and '=')")
	fs.StringVar(&bucket, "bucket", "", "an RLQS bucket id, key=value,key2=value2, instead of --descriptor")
	if err := parse(fs, args); err != nil {
		return exit(err, stderr)
	}
	if domain == "" || (desc == "") == (bucket == "") {
		return exit(fmt.Errorf("%w: give --domain and one of --descriptor, --bucket", errUsage), stderr)
	}
	es, err := parseEntries(desc + bucket)
	if err != nil {
		return exit(fmt.Errorf("%w: %w", errUsage, err), stderr)
	}
	cl, err := newClient(c, stderr)
	if err != nil {
		return exit(err, stderr)
	}
	if bucket != "" {
		return quotaUsage(cl, domain, es, stdout, stderr)
	}
	path := "/v1/usage?domain=" + url.QueryEscape(domain) + "&descriptor=" + query(es)
	us, bases, err := each(cl, func(ctx context.Context, base string) (admin.Usage, error) {
		var u admin.Usage
		return u, cl.do(ctx, base, http.MethodGet, path, nil, &u)
	})
	if c.json {
		_ = printJSON(stdout, us)
		return exit(err, stderr)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADMIN\tRULE\tLIMIT\tLEFT\tRESET_MS")
	for i, u := range us {
		rule, limit, left, reset := "(no rule)", "", "", ""
		if u.Matched {
			rule = term(u.Rule)
		}
		switch {
		case u.Unlimited:
			limit = "unlimited"
		case u.Limit != nil:
			limit = fmt.Sprintf("%d/%s %s", *u.Limit, u.Unit, u.Algorithm)
		}
		switch {
		case u.Remaining != nil:
			left, reset = fmt.Sprint(*u.Remaining), fmt.Sprint(*u.ResetMs)
		case u.Tokens != nil:
			left, reset = fmt.Sprintf("%d tokens", *u.Tokens), fmt.Sprint(*u.FullInMs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", term(bases[i]), rule, limit, left, reset)
	}
	_ = tw.Flush()
	return exit(err, stderr)
}

// quotaUsage prints a bucket's division: the replicas' answers merged,
// each Envoy once, as the replica serving it reports it.
func quotaUsage(cl *client, domain string, id []admin.Entry, stdout, stderr io.Writer) int {
	path := "/v1/quota?domain=" + url.QueryEscape(domain) + "&bucket=" + query(id)
	us, _, err := each(cl, func(ctx context.Context, base string) (rlqs.Usage, error) {
		var u rlqs.Usage
		return u, cl.do(ctx, base, http.MethodGet, path, nil, &u)
	})
	if len(us) == 0 {
		return exit(err, stderr)
	}
	m := mergeQuota(us)
	if cl.c.json {
		_ = printJSON(stdout, m)
		return exit(err, stderr)
	}
	fmt.Fprintf(stdout, "bucket of rule %s: %s, %v/s (burst %v), %s\n", term(m.Rule), term(m.Assignment), m.LimitRate, m.Burst, replicas(m.Replicas))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tCLIENT\tDEMAND/S\tASSIGNED/S")
	for _, c := range m.Clients {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", term(c.Replica), term(c.Client), rate(c.DemandRate), rate(c.AssignedRate))
	}
	_ = tw.Flush()
	return exit(err, stderr)
}

// mergeQuota merges replicas' divisions of one bucket: each client once,
// its serving replica's (local) entry preferred to others' reads of it.
func mergeQuota(us []rlqs.Usage) rlqs.Usage {
	m := us[0]
	type key struct{ replica, client string }
	byKey := map[key]rlqs.UsageClient{}
	for _, u := range us {
		m.Replicas = max(m.Replicas, u.Replicas)
		for _, c := range u.Clients {
			k := key{c.Replica, c.Client}
			if old, ok := byKey[k]; !ok || c.Local && !old.Local {
				byKey[k] = c
			}
		}
	}
	m.Clients = make([]rlqs.UsageClient, 0, len(byKey))
	for _, c := range byKey {
		m.Clients = append(m.Clients, c)
	}
	slices.SortFunc(m.Clients, func(a, b rlqs.UsageClient) int {
		return cmp.Or(cmp.Compare(a.Replica, b.Replica), cmp.Compare(a.Client, b.Client))
	})
	return m
}

func rate(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *p)
}
