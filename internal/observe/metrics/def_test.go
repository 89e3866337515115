package metrics

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

var (
	seriesName = regexp.MustCompile(`^fastlimit_[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	labelName  = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
)

// TestDefNames lints every definition, as CoreDNS's
// test/metric_naming_test.go lints its metrics: a fastlimit_ snake-case
// name, _total on counters and only on them, _seconds on histograms
// (each measures time), snake-case labels, a help sentence, and each
// name once.
func TestDefNames(t *testing.T) {
	seen := map[string]bool{}
	for _, tab := range tables {
		for _, d := range tab.defs {
			if !seriesName.MatchString(d.name) {
				t.Errorf("%s: not fastlimit_ and snake case", d.name)
			}
			if total := strings.HasSuffix(d.name, "_total"); total != (d.kind == counter) {
				t.Errorf("%s: a %s; _total ends the names of counters, and only theirs", d.name, d.kind)
			}
			if d.kind == histogram && (!strings.HasSuffix(d.name, "_seconds") || len(d.buckets) == 0) {
				t.Errorf("%s: a histogram of time needs _seconds and buckets", d.name)
			}
			if d.kind != histogram && d.buckets != nil {
				t.Errorf("%s: buckets on a %s", d.name, d.kind)
			}
			for _, l := range d.labels {
				if !labelName.MatchString(l) || l == "le" || l == "quantile" {
					t.Errorf("%s: label %q", d.name, l)
				}
			}
			if d.help == "" || !strings.HasSuffix(d.help, ".") {
				t.Errorf("%s: help %q is not a sentence", d.name, d.help)
			}
			if page, _, _ := strings.Cut(d.see, "#"); page != "" {
				if _, err := os.Stat(filepath.Join(docsDir, page)); err != nil {
					t.Errorf("%s: see %s: %v", d.name, d.see, err)
				}
			}
			if seen[d.name] {
				t.Errorf("%s: defined twice", d.name)
			}
			seen[d.name] = true
		}
	}
}

// TestEveryDefExported builds every collector of the package, each
// series made to appear, and checks that what is gathered is what the
// definitions say, both ways: name, type, help and labels; promlint
// checks the lot.
func TestEveryDefExported(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	registerAll(t, reg)
	mfs := scrape.Linted(t, reg)
	byName := map[string]*def{}
	for _, tab := range tables {
		for _, d := range tab.defs {
			byName[d.name] = d
		}
	}
	types := map[kind]dto.MetricType{counter: dto.MetricType_COUNTER, gauge: dto.MetricType_GAUGE, histogram: dto.MetricType_HISTOGRAM}
	gathered := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "fastlimit_") {
			continue
		}
		gathered[name] = true
		d := byName[name]
		if d == nil {
			t.Errorf("%s is exported but not defined", name)
			continue
		}
		if mf.GetType() != types[d.kind] || mf.GetHelp() != d.help {
			t.Errorf("%s: exported as a %v with help %q, defined as a %s with %q", name, mf.GetType(), mf.GetHelp(), d.kind, d.help)
		}
		var labels []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		if want := slices.Sorted(slices.Values(d.labels)); !slices.Equal(labels, want) {
			t.Errorf("%s: labels %v, defined %v", name, labels, want)
		}
	}
	for name := range byName {
		if !gathered[name] {
			t.Errorf("%s is defined but not exported", name)
		}
	}
}

// registerAll registers every collector of the package on reg, with at
// least one value in each series.
func registerAll(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	m, err := New(reg, Options{NearLimitRatio: 0.8, MaxDetailedMetricSeries: 1})
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, m)
	m.DomainsRemoved([]string{"gone"})
	m.GlobalShadowed()
	detailed := window("d.v", 10)
	detailed.DetailedMetric = true
	for _, v := range []string{"a", "b"} { // the second folds
		m.Decided("d", view{{{Key: "v", Value: v}}}, &limiter.Response{Statuses: []limiter.Status{{Limit: detailed, Hits: 1, Remaining: 5}}}, time.Millisecond)
	}

	one := func() float64 { return 1 }
	var n atomic.Int64
	q, err := NewRLQS(reg, func() map[string]RLQSTotals { return map[string]RLQSTotals{"d": {Streams: 1}} })
	if err != nil {
		t.Fatal(err)
	}
	q.Reported("d", 1, 1)
	q.Requests("d", 1, 0)
	q.ActionsSent("d", 1)
	q.Pushed("d")
	q.Abandoned("d")
	q.EmptyBucketID("d")
	q.Unmatched("d")
	q.Silent("d")
	q.ReportRefused("d")
	q.Unidentified()
	q.BucketsRefused("d", "stream", 2)
	q.StreamRefused()
	q.StoreFailed()
	q.ReportsShed("d", 1)
	q.Exchanged(time.Millisecond, 1)
	for _, err := range []error{
		RegisterBuildInfo(reg, "test"),
		RegisterStore(reg, StoreReaders{BreakerState: one, RedisBatches: one, RedisBatchedOps: one,
			CacheHits: one, CacheFull: one, CacheEntries: one, MemoryKeys: one, MemoryRefused: one}),
		RegisterGRPCBounds(reg, GRPCBounds{Conns: func() connlimit.Stats { return connlimit.Stats{Max: 1} },
			StreamsRefused: &n, TimedOut: &n, IdleClosed: &n}),
		RegisterHTTPListeners(reg, map[string]func() (connlimit.Stats, bool){
			"http": func() (connlimit.Stats, bool) { return connlimit.Stats{}, true }}),
		reg.Register(RefStatsOverflow()),
		reg.Register(RefStatsConflicts()),
		// No child answers there: only the restarts are exported.
		RegisterRLQSProcess(reg, one, "http://127.0.0.1:1/metrics", nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewTLS(reg); err != nil {
		t.Fatal(err)
	}
	a, err := NewAdmin(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.Tokens(1)
	a.TokenFileRefused()
	a.Refused(AdminHost)
}

// definedAt finds the series defined outside this package: a fastlimit_
// name in a Go source's Prometheus options or descriptions.
var definedAt = regexp.MustCompile(`(Name:\s*|NewDesc\(\s*)"fastlimit_|Namespace:\s*"fastlimit"`)

// TestSeriesDefinedHere fails on a FastLimit series defined in another
// package than this one, whose table the docs are generated from.
func TestSeriesDefinedHere(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if abs, _ := filepath.Abs(path); abs == here || strings.HasPrefix(e.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := definedAt.FindIndex(b); loc != nil {
			t.Errorf("%s defines a fastlimit_ series (%q): define it in internal/observe/metrics", path, b[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDocsTable keeps the tables of series in docs/metrics.md in step
// with the definitions; -update rewrites them.
func TestDocsTable(t *testing.T) {
	path := filepath.Join(docsDir, "metrics.md")
	old, err := os.ReadFile(path)
	doc := string(old)
	if err == nil {
		doc, err = withTables(doc)
	}
	switch {
	case err != nil:
		t.Fatal(err)
	case doc == string(old):
	case *update:
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	default:
		t.Errorf("%s: the tables of series are stale: run %s", path, regenerate)
	}
}

// docsDir is docs/, from this package.
var docsDir = filepath.Join("..", "..", "..", "docs")

var update = flag.Bool("update", false, "rewrite the generated tables of docs/metrics.md")
