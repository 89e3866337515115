// Package statsmap maps statsd stat names to Prometheus names and labels
// with the mapping files of prometheus/statsd_exporter (the subset that
// envoyproxy/ratelimit's PROMETHEUS_MAPPER_YAML uses).
package statsmap

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Type is the kind of a statsd stat, as a mapping's match_metric_type
// names it.
type Type uint8

// Stat types. AnyType in a mapping matches every type.
const (
	AnyType Type = iota
	Counter
	Gauge
	Observer // timers, histograms and distributions
)

// ObserverKind is how an observer stat is exported.
type ObserverKind uint8

// Observer kinds. Summary is statsd_exporter's default.
const (
	Summary ObserverKind = iota
	Histogram
)

// Label is one Prometheus label.
type Label struct{ Name, Value string }

// Objective is one quantile of a summary and its allowed error.
type Objective struct{ Quantile, Error float64 }

// Result is what a stat maps to.
type Result struct {
	// Name is the Prometheus metric name, escaped.
	Name string
	// Labels are sorted by name.
	Labels []Label
	// Help is the mapping's help text, "" for none.
	Help string
	// Drop is true when the mapping's action is drop: the stat is not
	// exported.
	Drop bool
	// Mapped is false for a stat that no mapping matched; it is exported
	// under its escaped name without labels, as statsd_exporter does.
	Mapped bool
	// Observer, Buckets, Objectives and Scale describe observer stats.
	Observer   ObserverKind
	Buckets    []float64
	Objectives []Objective
	Scale      float64 // multiplies observed values; 1 when not set
}

// Mapper maps stat names. It is immutable and safe for concurrent use.
type Mapper struct {
	globs   []*mapping // in file order; the first that matches wins
	regexes []*mapping // tried in file order when no glob matches
	unmapped
}

// unmapped are the observer settings of stats that no mapping matches.
type unmapped struct {
	observer   ObserverKind
	buckets    []float64
	objectives []Objective
}

type mapping struct {
	typ     Type
	glob    []string // segments; "*" captures one
	regex   *regexp.Regexp
	name    string
	labels  []Label // values are templates
	help    string
	drop    bool
	obs     ObserverKind
	buckets []float64
	objs    []Objective
	scale   float64
}

// DefBuckets are statsd_exporter's (and client_golang's) default
// histogram buckets.
var DefBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// DefObjectives are statsd_exporter's default summary quantiles.
var DefObjectives = []Objective{{0.5, 0.05}, {0.9, 0.01}, {0.99, 0.001}}

//go:embed default.yaml
var defaultYAML []byte

// Default returns the mapping that envoyproxy/ratelimit applies when
// PROMETHEUS_MAPPER_YAML is not set.
func Default() *Mapper {
	m, _, err := Parse(defaultYAML)
	if err != nil {
		panic("statsmap: default mapping: " + err.Error())
	}
	return m
}

// DefaultSeconds returns Default with the response time in seconds: its
// ratelimit_server.*.response_time mapping scaled by 0.001, as upstream
// envoyproxy/ratelimit's built-in mapping is since #1104 (the pinned
// version's holds milliseconds).
func DefaultSeconds() *Mapper {
	m := Default()
	for _, mp := range m.globs {
		if mp.name == responseTimeSeries {
			mp.scale = 0.001
		}
	}
	return m
}

// responseTimeSeries is the series of the reference's response timer.
const responseTimeSeries = "ratelimit_service_response_time_seconds"

// DefaultYAML returns the text of Default's mapping file.
func DefaultYAML() []byte { return slices.Clone(defaultYAML) }

// Map maps the stat name of type t. A stat that no mapping matches gets
// its escaped name, no labels and Mapped false.
func (m *Mapper) Map(name string, t Type) Result {
	for _, mp := range m.globs {
		if mp.typ != AnyType && mp.typ != t {
			continue
		}
		if caps, ok := matchGlob(mp.glob, name); ok {
			return mp.result(func(tmpl string) string { return expandGlob(tmpl, caps) })
		}
	}
	for _, mp := range m.regexes {
		idx := mp.regex.FindStringSubmatchIndex(name)
		if idx == nil || (mp.typ != AnyType && mp.typ != t) {
			continue
		}
		return mp.result(func(tmpl string) string {
			return string(mp.regex.ExpandString(nil, tmpl, name, idx))
		})
	}
	return Result{Name: EscapeName(name), Observer: m.observer, Buckets: m.buckets, Objectives: m.objectives, Scale: 1}
}

func (mp *mapping) result(expand func(string) string) Result {
	r := Result{
		Name: EscapeName(expand(mp.name)), Help: mp.help, Drop: mp.drop, Mapped: true,
		Observer: mp.obs, Buckets: mp.buckets, Objectives: mp.objs, Scale: mp.scale,
	}
	if len(mp.labels) > 0 {
		r.Labels = make([]Label, len(mp.labels))
		for i, l := range mp.labels {
			r.Labels[i] = Label{l.Name, expand(l.Value)}
		}
	}
	return r
}

// matchGlob matches name segment by segment against glob, whose "*"
// segments match any one segment (the empty one too). It returns the
// captured segments.
func matchGlob(glob []string, name string) ([]string, bool) {
	if strings.Count(name, ".")+1 != len(glob) {
		return nil, false
	}
	var caps []string
	rest := name
	for i, g := range glob {
		seg := rest
		if j := strings.IndexByte(rest, '.'); j >= 0 {
			seg, rest = rest[:j], rest[j+1:]
		}
		switch {
		case g == "*":
			if caps == nil {
				caps = make([]string, 0, len(glob)-i)
			}
			caps = append(caps, seg)
		case g != seg:
			return nil, false
		}
	}
	return caps, true
}

var templateRef = regexp.MustCompile(`\$\{?([a-zA-Z0-9_$]+)\}?`)

// expandGlob replaces $n and ${n} in tmpl with capture n (from 1); a
// reference to no capture becomes "", as statsd_exporter does.
func expandGlob(tmpl string, caps []string) string {
	if strings.IndexByte(tmpl, '$') < 0 {
		return tmpl
	}
	return templateRef.ReplaceAllStringFunc(tmpl, func(ref string) string {
		sub := templateRef.FindStringSubmatch(ref)
		n, err := strconv.Atoi(sub[1])
		if err != nil || n < 1 || n > len(caps) {
			return ""
		}
		return caps[n-1]
	})
}

// EscapeName makes name a valid Prometheus metric name as statsd_exporter
// does: every character other than [a-zA-Z0-9_] becomes '_' (a run of
// '-' after the first keeps one '_'), and a leading digit gets a '_'
// before it.
func EscapeName(name string) string {
	if name == "" {
		return ""
	}
	var b strings.Builder
	b.Grow(len(name) + 1)
	if name[0] >= '0' && name[0] <= '9' {
		b.WriteByte('_')
	}
	var prev rune
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
			b.WriteRune(c)
		case c == '-' && prev == '-':
		default:
			b.WriteByte('_')
		}
		prev = c
	}
	return b.String()
}

// Errors of Parse.
var (
	ErrSyntax  = errors.New("not a statsd_exporter mapping file")
	ErrMapping = errors.New("invalid mapping")
)

// mappingError locates an invalid mapping.
func mappingError(i, line int, format string, args ...any) error {
	return fmt.Errorf("%w %d (line %d): %s", ErrMapping, i+1, line, fmt.Sprintf(format, args...))
}
