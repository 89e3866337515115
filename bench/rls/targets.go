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
		out = append(out, target{what: what, goal: goal, format: fmtRatio, values: ratios(rr.Samples[0], rr.Samples[r.ref], m), ok: ok})
	}
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
	r.targetTable("Targets of issue 12", r.targetList())
}

// targetTable writes a table of goals, each checked round by round.
func (r *report) targetTable(title string, list []target) {
	if len(list) == 0 {
		return
	}
	r.line("### " + title)
	r.line("")
	if r.compare() {
		r.printf("Ratios are %s over %s, per round, unless named.\n\n", r.res.Binaries[0].Name, r.res.Binaries[r.ref].Name)
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

// redisCostTargetList returns issue 18's goals ("Redis cost, round 2")
// whose runs were measured: Redis CPU per decision against the compared
// server on windows of a minute, a hot key, the other algorithms against
// FastLimit's fixed window, and no regression of issue 12's figures.
func (r *report) redisCostTargetList() []target {
	c := r.res.Settings.Callers
	ids := thousands(r.res.Settings.Keys)
	fwm := r.res.find(runSpec{Key: "fwm", Descriptors: 1, Callers: c})
	fwm3 := r.res.find(runSpec{Key: "fwm", Descriptors: 3, Callers: c})
	few := r.res.find(runSpec{Key: "fwm", Descriptors: 1, Callers: c, Keys: idsFew})
	hot := r.res.find(runSpec{Key: "fwm", Descriptors: 1, Callers: c, Keys: 1})
	var out []target
	pair := func(rr *runResult, what, goal string, m metric, ok func(float64) bool) {
		if rr == nil || !r.compare() {
			return
		}
		out = append(out, target{what: what, goal: goal, format: fmtRatio, values: ratios(rr.Samples[0], rr.Samples[r.ref], m), ok: ok})
	}
	pair(fwm, fmt.Sprintf("Redis CPU per decision, %d callers, %s identifiers, windows of a minute, 1 descriptor", c, ids), "≤ 0.4x", mRedis, atMost(0.4))
	pair(fwm3, fmt.Sprintf("Redis CPU per decision, %d callers, %s identifiers, windows of a minute, 3 descriptors", c, ids), "≤ 0.6x", mRedis, atMost(0.6))
	pair(few, fmt.Sprintf("Redis CPU per decision, %d callers, %s identifiers, windows of a minute", c, thousands(idsFew)), "≤ 0.25x", mRedis, atMost(0.25))
	pair(hot, fmt.Sprintf("decisions/s, %d callers, one hot identifier", c), "≥ 2x", mRate, atLeast(2))
	pair(hot, fmt.Sprintf("Redis CPU per decision, %d callers, one hot identifier", c), "≤ 0.15x", mRedis, atMost(0.15))
	// The other algorithms against FastLimit's own fixed window, same
	// keyspace, same round.
	for _, keys := range []int64{0, idsFew, 1} {
		base := r.res.find(runSpec{Key: "fwm", Descriptors: 1, Callers: c, Keys: keys})
		for _, alg := range []struct{ key, name string }{{"swm", "sliding window"}, {"tbm", "token bucket"}} {
			rr := r.res.find(runSpec{Key: alg.key, Descriptors: 1, Callers: c, Keys: keys})
			if rr == nil || base == nil {
				continue
			}
			space := ids + " identifiers"
			switch keys {
			case idsFew:
				space = thousands(idsFew) + " identifiers"
			case 1:
				space = "one hot identifier"
			}
			out = append(out, target{
				what:   fmt.Sprintf("%s Redis CPU per decision, %s against fixed window's (same round), %s", r.res.Binaries[0].Name, alg.name, space),
				goal:   "≤ 1.3x",
				format: fmtRatio,
				values: ratios(rr.Samples[0], base.Samples[0], mRedis),
				ok:     atMost(1.3),
			})
		}
	}
	// No regression: issue 12's run when measured, else the minute's.
	base, what := r.res.find(runSpec{Key: "fw", Descriptors: 1, Callers: c}), "fixed window"
	if base == nil {
		base, what = fwm, "fixed window of a minute"
	}
	pair(base, fmt.Sprintf("decisions/s, %d callers, %s, 1 descriptor", c, what), "≥ 1.4x", mRate, atLeast(1.4))
	pair(base, fmt.Sprintf("p99, %d callers, %s, 1 descriptor", c, what), "≤ 0.7x", mP99, atMost(0.7))
	pair(base, fmt.Sprintf("server CPU per decision, %d callers, %s, 1 descriptor", c, what), "≤ 0.5x", mServer, atMost(0.5))
	return out
}

// redisCostTargets writes the table of issue 18's goals.
func (r *report) redisCostTargets() {
	r.targetTable("Targets of issue 18", r.redisCostTargetList())
}

// atMost and atLeast are a target's test of a ratio.
func atMost(x float64) func(float64) bool  { return func(v float64) bool { return v <= x } }
func atLeast(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }

// ratioTargets collects goals on the ratio of a run's first server to
// another of its servers.
type ratioTargets []target

// pair adds the goal on rr's first server against its server other,
// unless either was not measured.
func (ts *ratioTargets) pair(rr *runResult, other int, what, goal string, m metric, ok func(float64) bool) {
	if rr == nil || other < 0 || rr.Samples[0] == nil || rr.Samples[other] == nil {
		return
	}
	*ts = append(*ts, target{what: what, goal: goal, format: fmtRatio, values: ratios(rr.Samples[0], rr.Samples[other], m), ok: ok})
}
