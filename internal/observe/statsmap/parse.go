package statsmap

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// The file format, as statsd_exporter reads it. Rest collects the fields
// this package does not read, for warnings.
type fileYAML struct {
	Defaults defaultsYAML   `yaml:"defaults"`
	Mappings []mappingYAML  `yaml:"mappings"`
	Rest     map[string]any `yaml:",inline"`
}

type defaultsYAML struct {
	ObserverType     string          `yaml:"observer_type"`
	TimerType        string          `yaml:"timer_type"`
	MatchType        string          `yaml:"match_type"`
	Buckets          []float64       `yaml:"buckets"`
	Quantiles        []objectiveYAML `yaml:"quantiles"`
	SummaryOptions   *summaryYAML    `yaml:"summary_options"`
	HistogramOptions *histogramYAML  `yaml:"histogram_options"`
	Rest             map[string]any  `yaml:",inline"`
}

type mappingYAML struct {
	Match            string            `yaml:"match"`
	Name             string            `yaml:"name"`
	Labels           map[string]string `yaml:"labels"`
	Help             string            `yaml:"help"`
	Action           string            `yaml:"action"`
	MatchType        string            `yaml:"match_type"`
	MatchMetricType  string            `yaml:"match_metric_type"`
	ObserverType     string            `yaml:"observer_type"`
	TimerType        string            `yaml:"timer_type"`
	Buckets          []float64         `yaml:"buckets"`
	Quantiles        []objectiveYAML   `yaml:"quantiles"`
	SummaryOptions   *summaryYAML      `yaml:"summary_options"`
	HistogramOptions *histogramYAML    `yaml:"histogram_options"`
	Scale            *float64          `yaml:"scale"`
	Rest             map[string]any    `yaml:",inline"`
}

type objectiveYAML struct {
	Quantile float64 `yaml:"quantile"`
	Error    float64 `yaml:"error"`
}

type summaryYAML struct {
	Quantiles []objectiveYAML `yaml:"quantiles"`
	Rest      map[string]any  `yaml:",inline"`
}

type histogramYAML struct {
	Buckets []float64      `yaml:"buckets"`
	Rest    map[string]any `yaml:",inline"`
}

// notHonoured are statsd_exporter settings this package reads past, with
// why; each one present in a file yields a warning.
var notHonoured = map[string]string{
	"ttl":                            "series are never expired",
	"glob_disable_ordering":          "glob mappings always apply in file order",
	"honor_labels":                   "stats carry no labels of their own",
	"max_age":                        "summaries use client_golang's default max age",
	"age_buckets":                    "summaries use client_golang's default age buckets",
	"buf_cap":                        "summaries use client_golang's default buffer",
	"native_histogram_bucket_factor": "native histograms are not exported",
	"native_histogram_max_buckets":   "native histograms are not exported",
}

var (
	// globRE is a valid glob match: dot-separated segments, each "*" or a
	// name (the first may not start with a digit).
	globRE      = regexp.MustCompile(`^(\*|[a-zA-Z_][a-zA-Z0-9_-]*)(\.\*|\.[a-zA-Z0-9_][a-zA-Z0-9_-]*)*$`)
	nameRE      = regexp.MustCompile(`^([a-zA-Z_]|\$\{?\d+\}?)([a-zA-Z0-9_]|\$\{?\d+\}?)*$`)
	labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]+$`)
)

// Parse reads a statsd_exporter mapping file. It returns an error
// wrapping ErrSyntax for a file that is not one, and ErrMapping (with the
// mapping's number and line) for a mapping statsd_exporter would refuse.
// Settings it reads past (see notHonoured) and fields it does not know
// (statsd_exporter ignores those too) come back as warnings.
func Parse(data []byte) (*Mapper, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	var f fileYAML
	if err := doc.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	var warns []string
	warnRest := func(where string, rest map[string]any) {
		for _, k := range sortedKeys(rest) {
			warns = append(warns, restWarning(where, k))
		}
	}
	warnRest("file", f.Rest)
	m := &Mapper{}
	d := &f.Defaults
	warnRest("defaults", d.Rest)
	defObs, err := observerKind(first(d.ObserverType, d.TimerType))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: defaults: %w", ErrMapping, err)
	}
	defMatch := first(d.MatchType, "glob")
	if defMatch != "glob" && defMatch != "regex" {
		return nil, nil, fmt.Errorf("%w: defaults: match_type %q is neither glob nor regex", ErrMapping, defMatch)
	}
	defBuckets, defObjs := DefBuckets, DefObjectives
	if len(d.Buckets) > 0 {
		defBuckets = d.Buckets
	}
	if h := d.HistogramOptions; h != nil {
		warnRest("defaults.histogram_options", h.Rest)
		if len(h.Buckets) > 0 {
			defBuckets = h.Buckets
		}
	}
	if len(d.Quantiles) > 0 {
		defObjs = objectives(d.Quantiles)
	}
	if s := d.SummaryOptions; s != nil {
		warnRest("defaults.summary_options", s.Rest)
		if len(s.Quantiles) > 0 {
			defObjs = objectives(s.Quantiles)
		}
	}
	m.unmapped = unmapped{observer: defObs, buckets: defBuckets, objectives: defObjs}
	lines := mappingLines(&doc)
	for i := range f.Mappings {
		line := 0
		if i < len(lines) {
			line = lines[i]
		}
		mp, w, err := compile(&f.Mappings[i], i, line, defMatch, m.unmapped)
		if err != nil {
			return nil, nil, err
		}
		warns = append(warns, w...)
		if mp.regex != nil {
			m.regexes = append(m.regexes, mp)
		} else {
			m.globs = append(m.globs, mp)
		}
	}
	return m, warns, nil
}

// compile checks one mapping as statsd_exporter does and compiles it.
func compile(y *mappingYAML, i, line int, defMatch string, def unmapped) (*mapping, []string, error) {
	var warns []string
	where := fmt.Sprintf("mapping %d (line %d)", i+1, line)
	for _, k := range sortedKeys(y.Rest) {
		warns = append(warns, restWarning(where, k))
	}
	if y.Name == "" {
		return nil, nil, mappingError(i, line, "no metric name")
	}
	if !nameRE.MatchString(y.Name) {
		return nil, nil, mappingError(i, line, "metric name %q is not a Prometheus name (with $n captures)", y.Name)
	}
	mp := &mapping{name: y.Name, help: y.Help, scale: 1}
	for _, k := range sortedKeys(y.Labels) {
		if !labelNameRE.MatchString(k) {
			return nil, nil, mappingError(i, line, "invalid label name %q", k)
		}
		mp.labels = append(mp.labels, Label{k, y.Labels[k]})
	}
	switch y.Action {
	case "", "map":
	case "drop":
		mp.drop = true
	default:
		return nil, nil, mappingError(i, line, "action %q is neither map nor drop", y.Action)
	}
	var err error
	if mp.typ, err = metricType(y.MatchMetricType); err != nil {
		return nil, nil, mappingError(i, line, "%v", err)
	}
	switch first(y.MatchType, defMatch) {
	case "glob":
		if !globRE.MatchString(y.Match) {
			return nil, nil, mappingError(i, line, "invalid glob match %q", y.Match)
		}
		mp.glob = strings.Split(y.Match, ".")
	case "regex":
		if mp.regex, err = regexp.Compile(y.Match); err != nil {
			return nil, nil, mappingError(i, line, "invalid regex match: %v", err)
		}
	default:
		return nil, nil, mappingError(i, line, "match_type %q is neither glob nor regex", y.MatchType)
	}
	if err := observerOptions(mp, y, def); err != nil {
		return nil, nil, mappingError(i, line, "%v", err)
	}
	if y.SummaryOptions != nil {
		for _, k := range sortedKeys(y.SummaryOptions.Rest) {
			warns = append(warns, restWarning(where+": summary_options", k))
		}
	}
	if y.HistogramOptions != nil {
		for _, k := range sortedKeys(y.HistogramOptions.Rest) {
			warns = append(warns, restWarning(where+": histogram_options", k))
		}
	}
	return mp, warns, nil
}

func restWarning(where, k string) string {
	if why, ok := notHonoured[k]; ok {
		return fmt.Sprintf("%s: %s is not honoured: %s", where, k, why)
	}
	return fmt.Sprintf("%s: unknown field %s is ignored", where, k)
}

// observerOptions sets a mapping's observer kind, buckets, quantiles and
// scale, refusing what statsd_exporter refuses.
func observerOptions(mp *mapping, y *mappingYAML, def unmapped) error {
	var err error
	mp.obs = def.observer
	if t := first(y.ObserverType, y.TimerType); t != "" {
		if mp.obs, err = observerKind(t); err != nil {
			return err
		}
	}
	if y.Scale != nil {
		mp.scale = *y.Scale
	}
	if y.HistogramOptions != nil && len(y.Buckets) > 0 && len(y.HistogramOptions.Buckets) > 0 {
		return fmt.Errorf("buckets set both at the top level and in histogram_options")
	}
	if y.SummaryOptions != nil && len(y.Quantiles) > 0 && len(y.SummaryOptions.Quantiles) > 0 {
		return fmt.Errorf("quantiles set both at the top level and in summary_options")
	}
	switch mp.obs {
	case Histogram:
		if y.SummaryOptions != nil {
			return fmt.Errorf("summary_options on a histogram observer")
		}
		mp.buckets = def.buckets
		if len(y.Buckets) > 0 {
			mp.buckets = y.Buckets
		}
		if y.HistogramOptions != nil && len(y.HistogramOptions.Buckets) > 0 {
			mp.buckets = y.HistogramOptions.Buckets
		}
		if !sort.Float64sAreSorted(mp.buckets) {
			return fmt.Errorf("histogram buckets %v are not in increasing order", mp.buckets)
		}
	case Summary:
		if y.HistogramOptions != nil {
			return fmt.Errorf("histogram_options on a summary observer")
		}
		mp.objs = def.objectives
		if len(y.Quantiles) > 0 {
			mp.objs = objectives(y.Quantiles)
		}
		if y.SummaryOptions != nil && len(y.SummaryOptions.Quantiles) > 0 {
			mp.objs = objectives(y.SummaryOptions.Quantiles)
		}
	}
	return nil
}

func observerKind(s string) (ObserverKind, error) {
	switch s {
	case "", "summary":
		return Summary, nil
	case "histogram":
		return Histogram, nil
	}
	return 0, fmt.Errorf("observer type %q is neither histogram nor summary", s)
}

func metricType(s string) (Type, error) {
	switch s {
	case "":
		return AnyType, nil
	case "counter":
		return Counter, nil
	case "gauge":
		return Gauge, nil
	case "observer", "timer":
		return Observer, nil
	}
	return 0, fmt.Errorf("match_metric_type %q is not counter, gauge or observer", s)
}

func objectives(qs []objectiveYAML) []Objective {
	out := make([]Objective, len(qs))
	for i, q := range qs {
		out[i] = Objective{q.Quantile, q.Error}
	}
	return out
}

// mappingLines returns the line of each entry of the top-level mappings
// sequence.
func mappingLines(doc *yaml.Node) []int {
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "mappings" {
			var lines []int
			for _, n := range top.Content[i+1].Content {
				lines = append(lines, n.Line)
			}
			return lines
		}
	}
	return nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
