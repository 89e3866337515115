package main

import (
	"fmt"
	"slices"
	"strings"
)

// runSpec is one load to measure: requests with Descriptors descriptors on
// rule Key from Callers callers (closed loop), or arriving at Rate a
// second (open loop: Callers is 0), identifiers drawn from Keys (0:
// --keys), against a server on one redis-server or on a Redis Cluster.
// Every server that supports the rule runs it, in turn, once per round.
type runSpec struct {
	Key         string `json:"key"`
	Descriptors int    `json:"descriptors"`
	Callers     int    `json:"callers,omitempty"`
	Rate        int    `json:"rate,omitempty"`
	Keys        int64  `json:"keys,omitempty"`
	Cluster     bool   `json:"cluster,omitempty"`
}

// keys returns the run's number of identifiers: Keys, or def (--keys).
func (s runSpec) keys(def int64) int64 {
	if s.Keys > 0 {
		return s.Keys
	}
	return def
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
	load := plural(s.Callers, "caller")
	if s.Rate > 0 {
		load = thousands(int64(s.Rate)) + " a second (open loop)"
	}
	t := fmt.Sprintf("%s, %s, %s", r.title, plural(s.Descriptors, "descriptor"), load)
	if s.Keys > 0 {
		t += ", " + plural64(s.Keys, "identifier")
	}
	if s.Cluster {
		t += ", Redis Cluster"
	}
	return t
}

// short names the run in progress lines: "fw d3 c64 cluster".
func (s runSpec) short() string {
	t := fmt.Sprintf("%s d%d c%d", s.Key, s.Descriptors, s.Callers)
	if s.Rate > 0 {
		t = fmt.Sprintf("%s d%d r%d", s.Key, s.Descriptors, s.Rate)
	}
	if s.Keys > 0 {
		t += fmt.Sprintf(" k%d", s.Keys)
	}
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

// plural64 is plural with thousands separators: "1,000 identifiers".
func plural64(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return thousands(n) + " " + word + "s"
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
	{"fwm3", "fixed window of a minute, 3 descriptors", one("fwm", 3)},
	{"swm", "sliding window of a minute, 1 descriptor (FastLimit only)", one("swm", 1)},
	{"tbm", "token bucket of a minute, 1 descriptor (FastLimit only)", one("tbm", 1)},
	{"ids1k", "fixed window, sliding window and token bucket of a minute, 1 descriptor, on 1,000 identifiers: keys hit again within their window", func(o *options) []runSpec {
		return minuteRuns(o, idsFew)
	}},
	{"hot", "fixed window, sliding window and token bucket of a minute, 1 descriptor, every caller on one identifier: a hot key", func(o *options) []runSpec {
		return minuteRuns(o, 1)
	}},
	{"sweepm", "fixed window of a minute, 1 descriptor, at each --sweep caller count", func(o *options) []runSpec {
		var out []runSpec
		for _, c := range o.sweep {
			out = append(out, runSpec{Key: "fwm", Descriptors: 1, Callers: c})
		}
		return out
	}},
	{"fwm1k", "fixed window of a minute, 1 descriptor, on 1,000 identifiers", func(o *options) []runSpec {
		return []runSpec{{Key: "fwm", Descriptors: 1, Callers: o.callers, Keys: idsFew}}
	}},
	{"fwmhot", "fixed window of a minute, 1 descriptor, every caller on one identifier", func(o *options) []runSpec {
		return []runSpec{{Key: "fwm", Descriptors: 1, Callers: o.callers, Keys: 1}}
	}},
	{"open", "fixed window of a minute, 1 and 3 descriptors, open loop: requests arriving at each --rates rate (Poisson), whatever the server does", func(o *options) []runSpec {
		var out []runSpec
		for _, d := range []int{1, 3} {
			for _, r := range o.rates {
				out = append(out, runSpec{Key: "fwm", Descriptors: d, Rate: r})
			}
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

// minuteRuns returns one run a minute's rule of each algorithm, 1
// descriptor, --callers, on keys identifiers.
func minuteRuns(o *options, keys int64) []runSpec {
	return []runSpec{
		{Key: "fwm", Descriptors: 1, Callers: o.callers, Keys: keys},
		{Key: "swm", Descriptors: 1, Callers: o.callers, Keys: keys},
		{Key: "tbm", Descriptors: 1, Callers: o.callers, Keys: keys},
	}
}

// idsFew is the identifiers of scenario ids1k.
const idsFew = 1000

// defaultScenarios are the runs of issue 12's table; redisCostScenarios
// those of issue 18's (Redis cost, round 2); concurrencyScenarios those of
// issue 24's (Redis cost at every concurrency: the fixed window of a
// minute, the reference has it); fleetScenarios those of issue 39's (the
// open loop, and the closed loop's sweep for 1 and 64 callers).
const (
	defaultScenarios     = "unlimited,fw,fw3,fwm,sw,tb,sweep"
	redisCostScenarios   = "fw,fwm,fwm3,swm,tbm,ids1k,hot,sweepm"
	concurrencyScenarios = "sweepm,fwm3,fwm1k,fwmhot"
	fleetScenarios       = "open,sweepm"
)

// scenarioAliases name lists of scenarios.
var scenarioAliases = map[string]string{"redis-cost": redisCostScenarios, "concurrency": concurrencyScenarios, "fleet": fleetScenarios}

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
		case scenarioAliases[n] != "":
			sub, _ := parseScenarios(scenarioAliases[n])
			names = append(names, sub...)
			continue
		case !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == n }):
			return nil, fmt.Errorf("--scenarios: unknown scenario %q (known: %s, redis-cost, concurrency, fleet, all)", n, scenarioNames())
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--scenarios: no scenario (known: %s, redis-cost, concurrency, fleet, all)", scenarioNames())
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
