package opsctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"github.com/fastlimit/fastlimit/internal/admin"
)

// valueList is a repeatable string flag.
type valueList []string

func (l *valueList) String() string     { return fmt.Sprint(*l) }
func (l *valueList) Set(s string) error { *l = append(*l, s); return nil }

// runCounters is "fastlimit reset" and "fastlimit refund". A reset is sent
// to every replica (each embedded store holds its own counters; on a
// shared Redis the later ones find nothing left), a refund to the first
// only, so that a shared Redis gets the hits back once.
func runCounters(action string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var c common
	var domain, rule string
	var ds descriptorList
	var values valueList
	var hits uint64
	synopsis := "--domain D (--descriptor k=v[,k2=v2] ... | --rule R --value V ...) --token-file F [--admin A,B,...] [--json]"
	if action == "refund" {
		synopsis = "--hits N " + synopsis
	}
	fs := newFlags(action, synopsis, &c, getenv, stderr)
	fs.StringVar(&domain, "domain", "", "the descriptors' domain (required)")
	fs.Var(&ds, "descriptor", "a descriptor, key=value,key2=value2 (percent-encode ',' and '='); repeatable")
	fs.StringVar(&rule, "rule", "", "instead of --descriptor: a rule's path, e.g. edge.remote_address, with --value")
	fs.Var(&values, "value", "with --rule: the value of its next key-only or wildcard level; repeatable")
	if action == "refund" {
		fs.Uint64Var(&hits, "hits", 0, "hits to give back (required)")
	}
	if err := parse(fs, args); err != nil {
		return exit(err, stderr)
	}
	body, err := countersBody(fs, domain, rule, ds, values, hits)
	if err != nil {
		return exit(err, stderr)
	}
	cl, err := newClient(c, stderr)
	if err != nil {
		return exit(err, stderr)
	}
	if action == "refund" {
		cl.bases = cl.bases[:1]
	}
	answers, bases, err := each(cl, func(ctx context.Context, base string) (admin.CountersAnswer, error) {
		var a admin.CountersAnswer
		return a, cl.do(ctx, base, http.MethodPost, "/v1/counters/"+action, body, &a)
	})
	if c.json {
		_ = printJSON(stdout, answers)
	} else {
		for i, a := range answers {
			printCounters(stdout, bases[i], &a)
		}
	}
	return exit(err, stderr)
}

// countersBody builds the body of a counters write from the flags.
func countersBody(fs *flag.FlagSet, domain, rule string, ds descriptorList, values []string, hits uint64) (*admin.CountersBody, error) {
	switch {
	case domain == "":
		return nil, fmt.Errorf("%w: --domain is required", errUsage)
	case (rule == "") == (len(ds) == 0):
		return nil, fmt.Errorf("%w: give --descriptor, or --rule with --value", errUsage)
	case rule == "" && len(values) > 0:
		return nil, fmt.Errorf("%w: --value goes with --rule", errUsage)
	case fs.Lookup("hits") != nil && hits == 0:
		return nil, fmt.Errorf("%w: --hits is required", errUsage)
	}
	body := &admin.CountersBody{Domain: domain, Rule: rule, Values: values, Hits: hits}
	for _, d := range ds {
		body.Descriptors = append(body.Descriptors, admin.Descriptor{Entries: d})
	}
	return body, nil
}

// printCounters writes one replica's answer: each descriptor before and
// after.
func printCounters(w io.Writer, base string, a *admin.CountersAnswer) {
	fmt.Fprintf(w, "%s: %s by %s\n", term(base), term(a.Action), term(a.Who))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESCRIPTOR\tRULE\tBEFORE\tAFTER")
	for _, d := range a.Descriptors {
		rule := "(no rule)"
		if d.Before.Rule != nil {
			rule = term(d.Before.Rule.Path)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", entriesText(d.Before.Entries), rule, left(&d.Before), left(&d.After))
	}
	_ = tw.Flush()
}

// left is what a descriptor has left: "3/5" or "7 tokens".
func left(e *admin.Explained) string {
	switch {
	case e.Remaining != nil && e.Rule != nil:
		return fmt.Sprintf("%d/%d left", *e.Remaining, e.Rule.RequestsPerUnit)
	case e.Tokens != nil:
		return fmt.Sprintf("%d tokens", *e.Tokens)
	case e.Rule != nil && e.Rule.Unlimited:
		return "unlimited"
	}
	return "-"
}
