package main

import (
	"fmt"
	"slices"
	"strings"
)

// runSpec is one load to measure: requests with Descriptors descriptors on
// rule Key from Callers callers, against a server on one redis-server or on
// a Redis Cluster. Every server that supports the rule runs it, in turn,
// once per round.
type runSpec struct {
	Key         string `json:"key"`
	Descriptors int    `json:"descriptors"`
	Callers     int    `json:"callers"`
	Cluster     bool   `json:"cluster,omitempty"`
}

// store says whether the run's decisions go to Redis.
func (s runSpec) store() bool {
	r, _ := ruleByKey(s.Key)
	return !r.unlimited
}

// title names the run in the report: "fixed window, 3 descriptors, 64
// callers, Redis Cluster".
func (s runSpec) title() string {
	r, _ := ruleByKey(s.Key)
	t := fmt.Sprintf("%s, %s, %s", r.title, plural(s.Descriptors, "descriptor"), plural(s.Callers, "caller"))
	if s.Cluster {
		t += ", Redis Cluster"
	}
	return t
}

// short names the run in progress lines: "fw d3 c64 cluster".
func (s runSpec) short() string {
	t := fmt.Sprintf("%s d%d c%d", s.Key, s.Descriptors, s.Callers)
	if s.Cluster {
		t += " cluster"
	}
	return t
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// scenario is a named group of runs, selected with --scenarios.
type scenario struct {
	name  string
	help  string
	specs func(o *options) []runSpec
}

// one is a scenario of one run: key's rule, d descriptors, --callers.
func one(key string, d int) func(o *options) []runSpec {
	return func(o *options) []runSpec { return []runSpec{{Key: key, Descriptors: d, Callers: o.callers}} }
}

// scenarios, in the order they run. Runs that two scenarios share (the
// sweep's point at --callers is the fw scenario) run once.
var scenarios = []scenario{
	{"unlimited", "`unlimited` rule, 1 descriptor: the gRPC floor, no store work", one("unlimited", 1)},
	{"fw", "fixed window, 1 descriptor", one("fw", 1)},
	{"fw3", "fixed window, 3 descriptors", one("fw", 3)},
	{"fwm", "fixed window of a minute, 1 descriptor: counters hit again within their window, where the 1-second windows of fw create one nearly every decision", one("fwm", 1)},
	{"sw", "sliding window, 1 descriptor (FastLimit only)", one("sw", 1)},
	{"tb", "token bucket, 1 descriptor (FastLimit only)", one("tb", 1)},
	{"sweep", "fixed window, 1 descriptor, at each --sweep caller count: Redis CPU per decision against callers, p50 at 1 caller", func(o *options) []runSpec {
		var out []runSpec
		for _, c := range o.sweep {
			out = append(out, runSpec{Key: "fw", Descriptors: 1, Callers: c})
		}
		return out
	}},
	{"cluster", "fixed window, 1 and 3 descriptors, on a Redis Cluster of 3 masters started for each server", func(o *options) []runSpec {
		return []runSpec{
			{Key: "fw", Descriptors: 1, Callers: o.callers, Cluster: true},
			{Key: "fw", Descriptors: 3, Callers: o.callers, Cluster: true},
		}
	}},
}

// defaultScenarios are the runs of the table.
const defaultScenarios = "unlimited,fw,fw3,fwm,sw,tb,sweep"

// parseScenarios checks a comma-separated list of scenario names ("all"
// is every one).
func parseScenarios(list string) ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(list, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			continue
		case n == "all":
			for _, s := range scenarios {
				names = append(names, s.name)
			}
			continue
		case !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == n }):
			return nil, fmt.Errorf("--scenarios: unknown scenario %q (known: %s, all)", n, scenarioNames())
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--scenarios: no scenario (known: %s, all)", scenarioNames())
	}
	return names, nil
}

func scenarioNames() string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

// plan returns the runs of the selected scenarios, in catalog order, each
// once, the ones on a single Redis first.
func plan(o *options) []runSpec {
	var out []runSpec
	for _, s := range scenarios {
		if !slices.Contains(o.scenarios, s.name) {
			continue
		}
		for _, spec := range s.specs(o) {
			if !slices.Contains(out, spec) {
				out = append(out, spec)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b runSpec) int {
		switch {
		case a.Cluster == b.Cluster:
			return 0
		case b.Cluster:
			return -1
		}
		return 1
	})
	return out
}
