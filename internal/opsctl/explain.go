package opsctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/fastlimit/fastlimit/internal/admin"
)

// replicaAnswer is one replica's raw answer, for --json.
type replicaAnswer struct {
	Admin  string          `json:"admin"`
	Answer json.RawMessage `json:"answer"`
}

// runExplain is "fastlimit explain": what each replica would answer a
// request now, charging nothing. It exits ExitLimited when any replica
// would answer OVER_LIMIT.
func runExplain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var c common
	var domain, file, bucket string
	var ds descriptorList
	var hits uint
	fs := newFlags("explain", "(--domain D --descriptor k=v[,k2=v2] ... | --request FILE | --domain D --bucket k=v[,k2=v2]) [--admin A,B,...] [--json]",
		&c, getenv, stderr)
	fs.StringVar(&domain, "domain", "", "the request's domain")
	fs.Var(&ds, "descriptor", "a descriptor of the request, key=value,key2=value2 (percent-encode ',' and '=' in keys and values); repeatable")
	fs.UintVar(&hits, "hits", 0, "the request's hits_addend (0: 1)")
	fs.StringVar(&file, "request", "", "a RateLimitRequest as POST /json takes it, in a file ('-': standard input), instead of --domain and --descriptor")
	fs.StringVar(&bucket, "bucket", "", "an RLQS bucket id, key=value,key2=value2: its rule and division among Envoys")
	if err := parse(fs, args); err != nil {
		return exit(err, stderr)
	}
	body, err := explainBody(domain, file, bucket, ds, hits)
	if err != nil {
		return exit(err, stderr)
	}
	cl, err := newClient(c, stderr)
	if err != nil {
		return exit(err, stderr)
	}
	raws, bases, err := each(cl, func(ctx context.Context, base string) (json.RawMessage, error) {
		var raw json.RawMessage
		return raw, cl.do(ctx, base, http.MethodPost, "/v1/explain", body, &raw)
	})
	if len(raws) == 0 {
		return exit(err, stderr)
	}
	code := ExitOK
	var out []replicaAnswer
	var texts []string
	for i, raw := range raws {
		out = append(out, replicaAnswer{Admin: bases[i], Answer: raw})
		if bucket != "" {
			texts = append(texts, string(raw))
			continue
		}
		var e admin.Explanation
		if jerr := json.Unmarshal(raw, &e); jerr != nil {
			return exit(fmt.Errorf("%s: %w", bases[i], jerr), stderr)
		}
		if e.Code == "OVER_LIMIT" {
			code = ExitLimited
		}
		texts = append(texts, explainText(&e))
	}
	switch {
	case c.json:
		_ = printJSON(stdout, out)
	case bucket != "":
		_ = printJSON(stdout, out) // a division is a tree: JSON is its table
	default:
		printExplain(stdout, bases, texts)
	}
	if err != nil {
		return exit(err, stderr)
	}
	return code
}

// explainBody builds the body of /v1/explain from the flags.
func explainBody(domain, file, bucket string, ds descriptorList, hits uint) (any, error) {
	switch {
	case file != "" && (domain != "" || len(ds) > 0 || bucket != ""):
		return nil, fmt.Errorf("%w: give --request alone, or --domain with --descriptor or --bucket", errUsage)
	case file != "":
		var b []byte
		var err error
		if file == "-" {
			b, err = io.ReadAll(os.Stdin)
		} else {
			b, err = os.ReadFile(file)
		}
		if err != nil {
			return nil, fmt.Errorf("--request: %w", err)
		}
		return json.RawMessage(b), nil
	case domain == "":
		return nil, fmt.Errorf("%w: --domain (or --request) is required", errUsage)
	case bucket != "" && len(ds) > 0:
		return nil, fmt.Errorf("%w: give --descriptor or --bucket, not both", errUsage)
	case bucket != "":
		es, err := parseEntries(bucket)
		if err != nil {
			return nil, fmt.Errorf("%w: --bucket: %w", errUsage, err)
		}
		id := map[string]string{}
		for _, e := range es {
			id[e.Key] = e.Value
		}
		return map[string]any{"domain": domain, "bucket": id}, nil
	case len(ds) == 0:
		return nil, fmt.Errorf("%w: give at least one --descriptor", errUsage)
	}
	// A RateLimitRequest as protojson reads it.
	req := struct {
		Domain      string             `json:"domain"`
		Descriptors []admin.Descriptor `json:"descriptors"`
		HitsAddend  uint               `json:"hits_addend,omitempty"`
	}{Domain: domain, HitsAddend: hits}
	for _, d := range ds {
		req.Descriptors = append(req.Descriptors, admin.Descriptor{Entries: d})
	}
	return req, nil
}

// printExplain writes the replicas' explanations: one when they agree.
func printExplain(w io.Writer, bases, texts []string) {
	same := true
	for _, t := range texts[1:] {
		same = same && t == texts[0]
	}
	if same {
		if len(bases) > 1 {
			fmt.Fprintf(w, "%s agree:\n", replicas(len(bases)))
		}
		fmt.Fprint(w, texts[0])
		return
	}
	for i, t := range texts {
		fmt.Fprintf(w, "== %s\n%s\n", term(bases[i]), t)
	}
}

// explainText is an explanation as a table, without times that change
// from one replica to the next, what clients chose escaped (term). A
// rule with several limits has a row under its descriptor's for each of
// them, the one that decides marked. A domain without rules says so
// first.
func explainText(e *admin.Explanation) string {
	var b strings.Builder
	if e.UnknownDomain {
		fmt.Fprintf(&b, "domain %s has no rules in force: every descriptor is OK (no rule). Their domains: %s\n",
			term(e.Domain), term(strings.Join(e.Domains, ", ")))
	}
	fmt.Fprintf(&b, "domain %s: the request would be %s (store %s; nothing charged)\n", term(e.Domain), term(e.Code), term(e.Store))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESCRIPTOR\tCODE\tRULE\tSOURCE\tLIMIT\tLEFT\tKEYS")
	for _, d := range e.Descriptors {
		rule, source, limit, left := "(no rule)", "", "", ""
		if d.Replaced {
			rule = "(replaced)"
		}
		if r := d.Rule; r != nil {
			rule, source, limit, left = term(r.Path), term(r.Source), limitText(r), leftText(&d.State, r.RequestsPerUnit)
			if r.Name != "" {
				rule += " (" + term(r.Name) + ")"
			}
		}
		code := term(d.Code)
		if d.Shadowed {
			code += " (shadowed: over)"
		}
		if d.Quota {
			code += " (quota)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", entriesText(d.Entries), code, rule, source, limit, left, keysText(d.Keys))
		for i, l := range d.Limits {
			label, code, limit := term(l.Label), term(l.Code), specText(&l.Spec)
			switch {
			case l.Replaced:
				code, limit = "(replaced)", ""
			case l.Shadowed:
				code += " (shadowed: over)"
			}
			if len(l.Replaces) > 0 {
				limit += " replaces " + term(strings.Join(l.Replaces, ","))
			}
			if l.Decides {
				label += " (decides)"
			}
			fmt.Fprintf(tw, "  limit %d of %d\t%s\t%s\t\t%s\t%s\t%s\n", i+1, len(d.Limits), code, label, limit,
				leftText(&l.State, l.RequestsPerUnit), keysText(l.Keys))
		}
	}
	_ = tw.Flush()
	return b.String()
}

// keysText is store keys for a table: they hold the descriptors' values.
func keysText(keys []string) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = term(k)
	}
	return strings.Join(out, " ")
}

// leftText is what a limit of size requests has left, before the charge.
func leftText(st *admin.State, size uint32) string {
	switch {
	case st.Remaining != nil:
		return fmt.Sprintf("%d of %d (count %d)", *st.Remaining, size, *st.Count)
	case st.Tokens != nil:
		return fmt.Sprintf("%d tokens", *st.Tokens)
	}
	return ""
}

// limitText is a rule's limit in short: "5/MINUTE fixed_window".
func limitText(r *admin.Rule) string {
	if r.Unlimited {
		return "unlimited"
	}
	s := specText(&r.Spec)
	if r.ShadowMode {
		s += " shadow"
	}
	if r.QuotaMode {
		s += " quota"
	}
	if len(r.Replaces) > 0 {
		s += " replaces " + term(strings.Join(r.Replaces, ","))
	}
	return s
}

// specText is a limit's size in short: "5/MINUTE fixed_window", a
// bucket's burst after it.
func specText(sp *admin.Spec) string {
	s := strconv.FormatUint(uint64(sp.RequestsPerUnit), 10) + "/"
	if sp.UnitMultiplier > 1 {
		s += strconv.FormatUint(uint64(sp.UnitMultiplier), 10) + " "
	}
	s += sp.Unit + " " + sp.Algorithm
	if sp.Burst != nil {
		s += " burst " + strconv.FormatFloat(*sp.Burst, 'f', -1, 64)
	}
	return s
}
