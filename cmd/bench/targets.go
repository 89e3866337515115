package main

import "fmt"

// target is one goal of issue 12 ("Fleet-scale Redis efficiency"), checked
// on every round: FastLimit's figure against the compared server's, or
// against its own `unlimited` run.
type target struct {
	what   string
	goal   string
	format func(lo, hi float64) string
	values []float64 // one per round
	ok     func(float64) bool
}

// targetList returns the goals whose runs were measured.
func (r *report) targetList() []target {
	c := r.res.Settings.Callers
	fw := r.res.find(runSpec{Key: "fw", Descriptors: 1, Callers: c})
	fw3 := r.res.find(runSpec{Key: "fw", Descriptors: 3, Callers: c})
	one := r.res.find(runSpec{Key: "fw", Descriptors: 1, Callers: 1})
	unl := r.res.find(runSpec{Key: "unlimited", Descriptors: 1, Callers: c})
	var out []target
	pair := func(rr *runResult, what, goal string, m metric, ok func(float64) bool) {
		if rr == nil || !r.compare() {
			return
		}
		out = append(out, target{what: what, goal: goal, format: fmtRatio, values: ratios(rr.Samples[0], rr.Samples[1], m), ok: ok})
	}
	atMost := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	atLeast := func(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }
	pair(fw, fmt.Sprintf("Redis CPU per decision, %d callers, 1 descriptor", c), "≤ 0.33x", mRedis, atMost(1.0/3))
	pair(fw3, fmt.Sprintf("Redis CPU per decision, %d callers, 3 descriptors", c), "≤ 0.33x", mRedis, atMost(1.0/3))
	pair(fw, fmt.Sprintf("decisions/s, %d callers, 1 descriptor", c), "≥ 2.5x", mRate, atLeast(2.5))
	if fw != nil && unl != nil {
		out = append(out, target{
			what:   fmt.Sprintf("%s decisions/s, fixed window against `unlimited`, %d callers, 1 descriptor (same round)", r.res.Binaries[0].Name, c),
			goal:   "≥ 85 %",
			format: fmtPercent,
			values: ratios(fw.Samples[0], unl.Samples[0], mRate),
			ok:     atLeast(0.85),
		})
	}
	pair(fw, fmt.Sprintf("p99, %d callers, 1 descriptor", c), "≤ 0.5x", mP99, atMost(0.5))
	pair(one, "p50, 1 caller, 1 descriptor", "≤ 0.5x", mP50, atMost(0.5))
	return out
}

// targets writes the table of issue 12's goals, each checked round by
// round.
func (r *report) targets() {
	list := r.targetList()
	if len(list) == 0 {
		return
	}
	r.line("### Targets of issue 12")
	r.line("")
	if r.compare() {
		r.printf("Ratios are %s over %s, per round.\n\n", r.res.Binaries[0].Name, r.res.Binaries[1].Name)
	}
	r.header("target", "goal", "measured", "met")
	for _, t := range list {
		met := 0
		for _, v := range t.values {
			if t.ok(v) {
				met++
			}
		}
		verdict := "**no**"
		switch {
		case len(t.values) == 0:
			verdict = "not measured"
		case met == len(t.values):
			verdict = "yes"
		case met > 0:
			verdict = fmt.Sprintf("in %d of %d rounds", met, len(t.values))
		}
		r.row(t.what, t.goal, orDash(fmtRange(t.values, t.format)), verdict)
	}
	r.line("")
}
