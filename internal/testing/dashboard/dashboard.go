// Package dashboard reads a Grafana dashboard's PromQL queries and the
// metric names they select, so that tests can hold every query against
// the series a server really exports.
package dashboard

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Query is one PromQL query of a dashboard.
type Query struct {
	// Where names it: the panel's title and the target's refId, or the
	// templating variable.
	Where string
	Expr  string
}

// dashboard is the part of Grafana's dashboard JSON that holds queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// Queries returns every PromQL query of a Grafana dashboard: each panel's
// targets (rows' panels included), and each query variable's query. A
// label_values(metric, label) or query_result(expr) variable gives its
// metric selector or expression; label_values(label), which names no
// metric, gives none.
func Queries(b []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decode dashboard: %w", err)
	}
	var out []Query
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) != "" {
					out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v.Query)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		if expr := variableExpr(q); expr != "" {
			out = append(out, Query{Where: "variable " + v.Name, Expr: expr})
		}
	}
	return out, nil
}

// variableQuery returns a query variable's query, which Grafana stores as
// a string or as {"query": "..."}.
func variableQuery(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object: %w", err)
	}
	return o.Query, nil
}

// variableExpr returns the PromQL inside a query variable's query.
func variableExpr(q string) string {
	q = strings.TrimSpace(q)
	for _, fn := range []string{"label_values", "query_result"} {
		inner, ok := call(q, fn)
		if !ok {
			continue
		}
		if fn == "query_result" {
			return inner
		}
		args := splitTop(inner)
		if len(args) < 2 {
			return "" // label_values(label)
		}
		return strings.Join(args[:len(args)-1], ",")
	}
	return ""
}

// call returns the argument text of fn(...) when q is exactly that call.
func call(q, fn string) (string, bool) {
	rest, ok := strings.CutPrefix(q, fn)
	if !ok {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
		return "", false
	}
	return rest[1 : len(rest)-1], true
}

// splitTop splits s on the commas outside brackets and strings.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case strings.IndexByte("({[", c) >= 0:
			depth++
		case strings.IndexByte(")}]", c) >= 0:
			depth--
		case c == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// MetricNamesOf returns the metric names every query selects, sorted and
// without repeats, or the first query that does not parse.
func MetricNamesOf(qs []Query) ([]string, error) {
	var all []string
	for _, q := range qs {
		names, err := MetricNames(q.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", q.Where, q.Expr, err)
		}
		all = append(all, names...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}
