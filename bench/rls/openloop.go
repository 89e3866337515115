package main

import (
	"fmt"
	"strings"
)

// The tables of issue 39 ("Fleet cost, round 3"): the open loop, where
// requests arrive at a fixed mean rate whatever the server does, every
// server side by side, and the targets.

// openRuns returns the open-loop runs, in plan order.
func (r *report) openRuns() []*runResult {
	var out []*runResult
	for _, rr := range r.res.Runs {
		if rr.Spec.Rate > 0 {
			out = append(out, rr)
		}
	}
	return out
}

// openLoop writes every open-loop run: each server's CPU per decision
// (Redis' and its own), latency and script calls, with ratios to the
// reference and the null server.
func (r *report) openLoop() {
	runs := r.openRuns()
	if len(runs) == 0 {
		return
	}
	r.line("### Open loop: requests arriving at a fixed mean rate")
	r.line("")
	r.line("Requests arrive as a Poisson process at the run's rate, whatever the server does (as Envoy's do): " +
		"each is sent at its intended time (a new sender when none is idle), and its latency runs from that time, " +
		"so that a server's stall counts in full for every request it delays. The load generator's own lateness " +
		"(send lag) is in every latency; its p99 is shown. The same arrivals, at the same times, for every server in a round. " +
		"CPU per decision counts the server's and Redis' idle work between requests too.")
	r.line("")
	names := r.names()
	cols := []string{"run", "server", "Redis CPU per decision"}
	if r.compare() {
		cols = append(cols, "/ "+names[r.ref])
	}
	cols = append(cols, "server CPU per decision")
	if r.null >= 0 {
		cols = append(cols, "/ null server")
	}
	cols = append(cols, "p50", "p99", "p99.9", "decisions per script call", "EVALSHA µs a call", "send lag p99", "decisions/s")
	r.header(cols...)
	for _, rr := range runs {
		for i, b := range r.res.Binaries {
			if rr.Samples[i] == nil {
				continue
			}
			ratio := func(other int, m metric) string {
				if other < 0 || other == i || rr.Samples[other] == nil || !b.isFastLimit() {
					return ""
				}
				return fmtRange(ratios(rr.Samples[i], rr.Samples[other], m), fmtRatio)
			}
			cells := []string{rr.Spec.title(), b.Name, orDash(fmtRange(values(rr.Samples[i], mRedis), mRedis.format))}
			if r.compare() {
				cells = append(cells, ratio(r.ref, mRedis))
			}
			cells = append(cells, orDash(fmtRange(values(rr.Samples[i], mServer), mServer.format)))
			if r.null >= 0 {
				cells = append(cells, ratio(r.null, mServer))
			}
			for _, m := range []metric{mP50, mP99, mP999, mPerCall, mEvalsha, mLag, mRate} {
				cells = append(cells, orDash(fmtRange(values(rr.Samples[i], m), m.format)))
			}
			r.row(cells...)
		}
	}
	r.line("")
}

// fleetTargetList returns issue 39's goals whose runs were measured.
func (r *report) fleetTargetList() []target {
	var out ratioTargets
	ref := r.refName()
	for _, g := range []struct {
		rate    int
		goal    float64
		latency bool
	}{{2000, 0.8, true}, {5000, 0.6, false}} {
		rr := r.res.find(runSpec{Key: "fwm", Descriptors: 1, Rate: g.rate})
		at := fmt.Sprintf("open loop, %s a second, 1 descriptor", thousands(int64(g.rate)))
		out.pair(rr, r.ref, fmt.Sprintf("Redis CPU per decision against %s, %s", ref, at), fmt.Sprintf("≤ %gx", g.goal), mRedis, atMost(g.goal))
		if g.latency && rr != nil && r.ref >= 0 && rr.Samples[0] != nil && rr.Samples[r.ref] != nil {
			out = append(out, target{what: fmt.Sprintf("p99 against %s's, %s", ref, at), goal: "≤ +1.5 ms", format: fmtDiffMicros,
				values: differences(rr.Samples[0], rr.Samples[r.ref], mP99), ok: atMost(1500)})
		}
	}
	if one := r.res.find(runSpec{Key: "fwm", Descriptors: 1, Callers: 1}); one != nil && one.Samples[0] != nil {
		var v []float64
		for _, s := range one.Samples[0] {
			if mOverPlain.counts(s) && mOverPlain.value(s) > 0 {
				v = append(v, mOverPlain.value(s))
			}
		}
		out = append(out, target{what: fmt.Sprintf("%s's one-decision script call against the plain script's (EVALSHA µs a call, INFO commandstats, same Redis, same run), fixed window per minute, 1 caller",
			r.names()[0]), goal: "≤ 1.3x", format: fmtRatio, values: v, ok: atMost(1.3)})
	}
	c := r.res.Settings.Callers
	closed := r.res.find(runSpec{Key: "fwm", Descriptors: 1, Callers: c})
	at := fmt.Sprintf("closed loop, %s, fixed window per minute, 1 descriptor", plural(c, "caller"))
	out.pair(closed, r.ref, fmt.Sprintf("Redis CPU per decision against %s, %s", ref, at), "≤ 0.6x", mRedis, atMost(0.6))
	out.pair(closed, r.ref, fmt.Sprintf("decisions/s against %s, %s", ref, at), "≥ 1.4x", mRate, atLeast(1.4))
	out.pair(closed, r.ref, fmt.Sprintf("p99 against %s, %s", ref, at), "≤ 0.7x", mP99, atMost(0.7))
	out.pair(closed, r.null, "server CPU per decision against the null server, "+at, "≤ 1.5x", mServer, atMost(1.5))
	return out
}

// fleetTargets writes the table of issue 39's goals.
func (r *report) fleetTargets() {
	list := r.fleetTargetList()
	if len(list) == 0 || len(r.openRuns()) == 0 {
		return
	}
	r.targetTable("Targets of issue 39", list)
	if strings.Contains(r.b.String(), "≤ +1.5 ms") {
		r.line("The p99 target is a difference: FastLimit's p99 less the reference's, round by round.")
		r.line("")
	}
}
