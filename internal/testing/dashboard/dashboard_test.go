package dashboard_test

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/dashboard"
)

func TestMetricNames(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`fastlimit_requests_total`, []string{"fastlimit_requests_total"}},
		{`sum by (code) (rate(fastlimit_requests_total{job=~"$job"}[$__rate_interval]))`, []string{"fastlimit_requests_total"}},
		{`sum(rate(a_total[5m])) by (domain, rule)`, []string{"a_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(fastlimit_request_duration_seconds_bucket{job="x"}[1m])))`,
			[]string{"fastlimit_request_duration_seconds_bucket"}},
		{`rate(a_total[5m]) / ignoring(code) group_left(rule) rate(b_total[5m])`, []string{"a_total", "b_total"}},
		{`a on(instance) b`, []string{"a", "b"}},
		{`time() - max(fastlimit_config_last_reload_success_timestamp_seconds)`, []string{"fastlimit_config_last_reload_success_timestamp_seconds"}},
		{`count by (hash) (fastlimit_config_info)`, []string{"fastlimit_config_info"}},
		{`topk(5, sum without (instance) (x))`, []string{"x"}},
		{`{__name__="via_name", job="j"}`, []string{"via_name"}},
		{`{__name__=~"regex.*"}`, nil},
		{`label_replace(m, "dst", "$1", "src", "(.*)")`, []string{"m"}},
		{`count_values("value", build_info)`, []string{"build_info"}},
		{`m offset 5m`, []string{"m"}},
		{`m @ start()`, []string{"m"}},
		{`max_over_time(m[1h:5m])`, []string{"m"}},
		{`a > bool 0 and b or c unless d`, []string{"a", "b", "c", "d"}},
		{`a:recording:rule * 1e3 + 0x1F - 1.5 + Inf + NaN`, []string{"a:recording:rule"}},
		{`x # comment naming not_a_metric`, []string{"x"}},
		{`${datasource} and [[old_style]] and m`, []string{"m"}},
		{`vector(1)`, nil},
		{`sum(m) by (le) and sum(m)`, []string{"m"}},
		{`avg without(job)(m{a!="b",c!~'d'})`, []string{"m"}},
		{"m{a=`raw\"`}", []string{"m"}},
	}
	for _, tc := range cases {
		got, err := dashboard.MetricNames(tc.expr)
		if err != nil {
			t.Errorf("MetricNames(%q): %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("MetricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestMetricNamesErrors(t *testing.T) {
	cases := []struct {
		expr string
		want error
	}{
		{`sum(rate(m[5m])`, dashboard.ErrUnbalanced},
		{`m{a="b"]`, dashboard.ErrUnbalanced},
		{`m)`, dashboard.ErrUnbalanced},
		{`m{a="b}`, dashboard.ErrUnterminated},
		{`m ; n`, dashboard.ErrUnexpected},
		{`m [[x`, dashboard.ErrUnbalanced},
		{`{__name__="a b"}`, dashboard.ErrBadName},
	}
	for _, tc := range cases {
		if _, err := dashboard.MetricNames(tc.expr); !errors.Is(err, tc.want) {
			t.Errorf("MetricNames(%q): %v, want %v", tc.expr, err, tc.want)
		}
	}
}

const sample = `{
  "panels": [
    {"title": "Decisions", "type": "timeseries",
     "targets": [{"refId": "A", "expr": "sum by (code) (rate(req_total[1m]))"}, {"refId": "B", "expr": ""}]},
    {"title": "Row", "type": "row", "collapsed": true, "panels": [
      {"title": "Inner", "targets": [{"refId": "A", "expr": "inner_metric"}]}
    ]},
    {"title": "Text", "type": "text"}
  ],
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus"},
    {"name": "job", "type": "query", "query": {"query": "label_values(build_info{a=\"b,c\"}, job)", "refId": "x"}},
    {"name": "domain", "type": "query", "query": "label_values(domain)"},
    {"name": "hash", "type": "query", "query": "query_result(count by (hash) (config_info))"},
    {"name": "custom", "type": "custom", "query": "a,b"}
  ]}
}`

func TestQueries(t *testing.T) {
	qs, err := dashboard.Queries([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []dashboard.Query{
		{Where: `panel "Decisions" target A`, Expr: "sum by (code) (rate(req_total[1m]))"},
		{Where: `panel "Inner" target A`, Expr: "inner_metric"},
		{Where: "variable job", Expr: `build_info{a="b,c"}`},
		{Where: "variable hash", Expr: "count by (hash) (config_info)"},
	}
	if !reflect.DeepEqual(qs, want) {
		t.Errorf("Queries:\n got %q\nwant %q", qs, want)
	}
	names, err := dashboard.MetricNamesOf(qs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"build_info", "config_info", "inner_metric", "req_total"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
}

func TestQueriesErrors(t *testing.T) {
	if _, err := dashboard.Queries([]byte(`{"panels": 3}`)); err == nil {
		t.Error("panels: 3 decoded")
	}
	if _, err := dashboard.Queries([]byte(`{"templating": {"list": [{"name": "v", "type": "query", "query": 3}]}}`)); err == nil {
		t.Error("query: 3 decoded")
	}
	_, err := dashboard.MetricNamesOf([]dashboard.Query{{Where: "panel x", Expr: "sum(m"}})
	if err == nil || !strings.Contains(err.Error(), "panel x") {
		t.Errorf("error %v does not name the query", err)
	}
}

var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// FuzzMetricNames proves that no expression makes MetricNames panic, and
// that every name it returns is a valid metric name written in the
// expression.
func FuzzMetricNames(f *testing.F) {
	for _, s := range []string{
		`sum by (code) (rate(fastlimit_requests_total{job=~"$job"}[$__rate_interval]))`,
		`{__name__="x"}`, `a offset 5m`, `m{a="\"}"}`, `[[v]]`, `${v:raw}`, `0x1f + 1e-3`, `"unterminated`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		names, err := dashboard.MetricNames(expr)
		if err != nil {
			return
		}
		for _, n := range names {
			if !metricName.MatchString(n) || !strings.Contains(expr, n) {
				t.Fatalf("MetricNames(%q) gave %q", expr, n)
			}
		}
	})
}
