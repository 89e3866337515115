package main

import (
	"fmt"
	"slices"
	"strings"
)

// The tables of issue 24 ("Redis cost at every concurrency"): FastLimit
// against the reference and the null server along the sweep, Redis' own
// time per command, the FastLimit variants, and the rounds' load.

// sweepKey returns the rule of the sweep the concurrency tables read: the
// minute's (issue 24 measured minute windows) when it ran, else the
// second's, or "" when neither has two points.
func (r *report) sweepKey() string {
	for _, key := range []string{"fwm", "fw"} {
		n := 0
		for _, c := range r.res.Settings.Sweep {
			if r.res.find(runSpec{Key: key, Descriptors: 1, Callers: c}) != nil {
				n++
			}
		}
		if n >= 2 {
			return key
		}
	}
	return ""
}

// against returns "ratios (a's values vs b's)" of metric m between
// servers a and b of rr, "—" when either did not measure it.
func against(rr *runResult, a, b int, m metric) string {
	if rr == nil || a < 0 || b < 0 || rr.Samples[a] == nil || rr.Samples[b] == nil {
		return "—"
	}
	ratio := fmtRange(ratios(rr.Samples[a], rr.Samples[b], m), fmtRatio)
	va, vb := fmtRange(values(rr.Samples[a], m), m.format), fmtRange(values(rr.Samples[b], m), m.format)
	if ratio == "" {
		return "—"
	}
	return fmt.Sprintf("%s (%s vs %s)", ratio, va, vb)
}

// concurrency writes FastLimit against the reference and the null server
// at each sweep point: Redis and server CPU per decision, as ratios.
func (r *report) concurrency() {
	key := r.sweepKey()
	if key == "" || !r.compare() && r.null < 0 {
		return
	}
	rl, _ := ruleByKey(key)
	r.printf("### Against callers: Redis and server CPU per decision (%s, 1 descriptor)\n\n", rl.title)
	names := r.names()
	cols := []string{"callers"}
	if r.compare() {
		ref := names[r.ref]
		cols = append(cols, "Redis CPU per decision, "+names[0]+" / "+ref, "server CPU per decision, "+names[0]+" / "+ref)
	}
	if r.null >= 0 {
		cols = append(cols, "server CPU per decision, "+names[0]+" / null server")
		if r.compare() {
			cols = append(cols, "server CPU per decision, "+names[r.ref]+" / null server")
		}
	}
	cols = append(cols, names[0]+" decisions per script call", names[0]+" EVALSHA µs a call")
	r.header(cols...)
	for _, c := range r.res.Settings.Sweep {
		rr := r.res.find(runSpec{Key: key, Descriptors: 1, Callers: c})
		if rr == nil {
			continue
		}
		cells := []string{fmt.Sprint(c)}
		if r.compare() {
			cells = append(cells, against(rr, 0, r.ref, mRedis), against(rr, 0, r.ref, mServer))
		}
		if r.null >= 0 {
			cells = append(cells, against(rr, 0, r.null, mServer))
			if r.compare() {
				cells = append(cells, against(rr, r.ref, r.null, mServer))
			}
		}
		cells = append(cells, orDash(fmtRange(values(rr.Samples[0], mPerCall), mPerCall.format)),
			orDash(fmtRange(values(rr.Samples[0], mEvalsha), mEvalsha.format)))
		r.row(cells...)
	}
	r.line("")
}

// concurrencyTargetList returns issue 24's goals whose runs were measured.
func (r *report) concurrencyTargetList() []target {
	key := r.sweepKey()
	if key == "" {
		key = "fwm"
	}
	c := r.res.Settings.Callers
	var out ratioTargets
	rl, _ := ruleByKey(key)
	for _, g := range []struct {
		callers int
		goal    float64
	}{{1, 1.1}, {4, 0.9}, {16, 0.7}, {64, 0.45}} {
		out.pair(r.res.find(runSpec{Key: key, Descriptors: 1, Callers: g.callers}), r.ref,
			fmt.Sprintf("Redis CPU per decision against %s, %s, %s", r.refName(), rl.title, plural(g.callers, "caller")), fmt.Sprintf("≤ %gx", g.goal), mRedis, atMost(g.goal))
	}
	for _, g := range []struct {
		spec runSpec
		what string
		goal float64
	}{
		{runSpec{Key: "fwm", Descriptors: 3, Callers: c}, "3 descriptors", 0.6},
		{runSpec{Key: "fwm", Descriptors: 1, Callers: c, Keys: idsFew}, thousands(idsFew) + " identifiers", 0.3},
		{runSpec{Key: "fwm", Descriptors: 1, Callers: c, Keys: 1}, "one hot identifier", 0.2},
	} {
		out.pair(r.res.find(g.spec), r.ref, fmt.Sprintf("Redis CPU per decision against %s, fixed window per minute, %s, %s", r.refName(), g.what, plural(c, "caller")),
			fmt.Sprintf("≤ %gx", g.goal), mRedis, atMost(g.goal))
	}
	if one := r.res.find(runSpec{Key: key, Descriptors: 1, Callers: 1}); one != nil && one.Samples[0] != nil {
		out = append(out, target{what: fmt.Sprintf("%s Redis time of a one-decision script call (EVALSHA, INFO commandstats), %s, 1 caller", r.names()[0], rl.title),
			goal: "≤ 10 µs", format: fmtCallTime, values: values(one.Samples[0], mEvalsha), ok: atMost(10)})
	}
	for _, g := range []struct {
		callers int
		goal    float64
	}{{c, 1.5}, {1, 1.4}} {
		out.pair(r.res.find(runSpec{Key: key, Descriptors: 1, Callers: g.callers}), r.null,
			fmt.Sprintf("server CPU per decision against the null server, %s, %s", rl.title, plural(g.callers, "caller")), fmt.Sprintf("≤ %gx", g.goal), mServer, atMost(g.goal))
	}
	at := r.res.find(runSpec{Key: key, Descriptors: 1, Callers: c})
	out.pair(at, r.ref, fmt.Sprintf("decisions/s against %s, %s, %s", r.refName(), rl.title, plural(c, "caller")), "≥ 1.3x", mRate, atLeast(1.3))
	out.pair(at, r.ref, fmt.Sprintf("p99 against %s, %s, %s", r.refName(), rl.title, plural(c, "caller")), "≤ 0.7x", mP99, atMost(0.7))
	return out
}

// refName names the --compare server, or "the reference".
func (r *report) refName() string {
	if r.compare() {
		return r.names()[r.ref]
	}
	return "the reference"
}

// concurrencyTargets writes the table of issue 24's goals.
func (r *report) concurrencyTargets() {
	r.targetTable("Targets of issue 24", r.concurrencyTargetList())
}

// commandTimes writes Redis' own time per command at one caller, from INFO
// commandstats: a one-decision script call's cost, without the network's.
func (r *report) commandTimes() {
	var rows [][]string
	for _, rr := range r.res.Runs {
		if rr.Spec.Callers != 1 || !rr.Spec.store() {
			continue
		}
		for i, b := range r.res.Binaries {
			if rr.Samples[i] == nil || len(values(rr.Samples[i], mRedis)) == 0 {
				continue
			}
			calls := metric{"", func(s *sample) float64 {
				return float64(s.timed("evalsha").Calls) / max(s.decisions()*float64(max(s.Descriptors, 1)), 1)
			}, fmtPerCall, true}
			var plain []float64
			for _, v := range values(rr.Samples[i], mOverPlain) {
				if v > 0 {
					plain = append(plain, v)
				}
			}
			rows = append(rows, []string{rr.Spec.title(), b.Name,
				orDash(fmtRange(values(rr.Samples[i], mEvalsha), mEvalsha.format)),
				orDash(fmtRange(values(rr.Samples[i], mPlainFL), mPlainFL.format)),
				orDash(fmtRange(values(rr.Samples[i], mPlain), mPlain.format)),
				orDash(fmtRange(plain, fmtRatio)),
				orDash(fmtRange(values(rr.Samples[i], calls), fmtPerCall)),
				orDash(fmtRange(values(rr.Samples[i], mIncrby), mIncrby.format)),
				orDash(fmtRange(values(rr.Samples[i], mExpire), mExpire.format))})
		}
	}
	if len(rows) == 0 {
		return
	}
	r.line("### Redis' own time per command at 1 caller (INFO commandstats)")
	r.line("")
	r.line("`usec` over `calls` of each command in the measured phase: the time Redis runs it, without reading, " +
		"parsing or replying. A script's own INCRBYs count under INCRBY as well as in its EVALSHA. " +
		"At one caller, a phase of its own follows FastLimit's run: the same load again, and beside it, on the same " +
		"Redis, the plain script (TIME, INCRBY, PEXPIREAT when new: the least a script can do for the decision) as a " +
		"Redis function (FCALL, counted apart; it costs Redis somewhat less than the same body's EVALSHA), every " +
		"millisecond, on keys of its own: both meet the same Redis, its caches and the machine's other work.")
	r.line("")
	r.header("run", "server", "EVALSHA µs a call", "EVALSHA µs a call beside the plain script", "plain script's µs a call (FCALL)", "/ plain script", "EVALSHA calls per counter", "INCRBY µs a call", "EXPIRE µs a call")
	for _, row := range rows {
		r.row(row...)
	}
	r.line("")
}

// variants writes every FastLimit server (FastLimit and its --variant
// servers) side by side, run by run.
func (r *report) variants() {
	if r.res.index(roleVariant) < 0 {
		return
	}
	var fl []int
	for i, b := range r.res.Binaries {
		if b.isFastLimit() {
			fl = append(fl, i)
		}
	}
	r.line("### FastLimit variants")
	r.line("")
	var flags []string
	for _, i := range fl[1:] {
		b := r.res.Binaries[i]
		flags = append(flags, fmt.Sprintf("%s: `%s`", b.Name, strings.Join(b.Args, " ")))
	}
	r.printf("Each variant is the FastLimit binary with flags of its own (%s), on a Redis of its own, measured in the same rounds.\n\n",
		strings.Join(flags, "; "))
	cols := []string{"run", "server", "Redis CPU per decision"}
	if r.compare() {
		cols = append(cols, "/ "+r.names()[r.ref])
	}
	cols = append(cols, "server CPU per decision", "p50", "p99", "decisions/s", "decisions per script call", "EVALSHA µs a call")
	r.header(cols...)
	for _, rr := range r.res.Runs {
		for _, i := range fl {
			if rr.Samples[i] == nil {
				continue
			}
			cells := []string{rr.Spec.title(), r.res.Binaries[i].Name, orDash(fmtRange(values(rr.Samples[i], mRedis), mRedis.format))}
			if r.compare() {
				cell := "—"
				if rr.Samples[r.ref] != nil {
					cell = orDash(fmtRange(ratios(rr.Samples[i], rr.Samples[r.ref], mRedis), fmtRatio))
				}
				cells = append(cells, cell)
			}
			for _, m := range []metric{mServer, mP50, mP99, mRate, mPerCall, mEvalsha} {
				cells = append(cells, orDash(fmtRange(values(rr.Samples[i], m), m.format)))
			}
			r.row(cells...)
		}
	}
	r.line("")
}

// rounds writes every round's load: before it and after it, and the
// other processes' CPU while its servers were measured; void rounds are
// marked.
func (r *report) rounds() {
	r.line("### Rounds and the machine's load")
	r.line("")
	r.header("run", "round", "1-minute load before", "after", "waited for it", "other processes' CPU, cores", "")
	void := 0
	for _, rr := range r.res.Runs {
		for _, rd := range rr.Rounds {
			var other []float64
			for i := range r.res.Binaries {
				for _, s := range rr.Samples[i] {
					if s.Round == rd.Round {
						other = append(other, s.otherCores())
					}
				}
			}
			mark := ""
			if rd.Void {
				mark = "**void**"
				void++
			}
			waited := ""
			if rd.Waited > 0 {
				waited = fmtSeconds(rd.Waited)
			}
			r.row(rr.Spec.title(), fmt.Sprint(rd.Round), fmtLoad(rd.LoadBefore, rd.LoadBefore), fmtLoad(rd.LoadAfter, rd.LoadAfter),
				waited, orDash(fmtRange(other, fmtLoad)), mark)
		}
	}
	r.line("")
	if void > 0 {
		r.printf("%d void rounds: they count in no range, ratio or target above.\n\n", void)
	}
}

// fastLimitKinds are the roles of servers that run FastLimit.
var fastLimitKinds = []role{roleFastLimit, roleVariant}

// isFastLimit says whether b runs FastLimit (the measured one or a variant).
func (b binaryInfo) isFastLimit() bool { return slices.Contains(fastLimitKinds, b.Role) }
