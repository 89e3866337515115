package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// metric is one figure of a sample, and how to print a range of it.
type metric struct {
	name   string
	value  func(*sample) float64
	format func(lo, hi float64) string
	redis  bool // a figure of the server's Redis: none for the null server
}

var (
	mRate    = metric{"decisions/s", func(s *sample) float64 { return s.Report.DecisionsPerSec }, fmtRate, false}
	mP50     = metric{"p50", func(s *sample) float64 { return s.Report.Latency.P50 }, fmtMicros, false}
	mP99     = metric{"p99", func(s *sample) float64 { return s.Report.Latency.P99 }, fmtMicros, false}
	mP999    = metric{"p99.9", func(s *sample) float64 { return s.Report.Latency.P999 }, fmtMicros, false}
	mServer  = metric{"server CPU per decision", func(s *sample) float64 { return s.perDecision(s.ServerCPU) }, fmtCPU, false}
	mRedis   = metric{"Redis CPU per decision", func(s *sample) float64 { return s.perDecision(s.RedisCPU) }, fmtCPU, true}
	mLoadgen = metric{"loadgen CPU per decision", func(s *sample) float64 { return s.perDecision(s.Report.CPUSeconds) }, fmtCPU, false}
	mKernel  = metric{"Redis kernel CPU per decision", func(s *sample) float64 { return s.perDecision(s.RedisSysCPU) }, fmtCPU, true}
	mPerCall = metric{"decisions per script call", func(s *sample) float64 { return s.perCall() }, fmtPerCall, true}
	mErrors  = metric{"errors", func(s *sample) float64 { return float64(s.Report.Errors) }, fmtCount, false}
	mLoad    = metric{"load average (1 min) before", func(s *sample) float64 { return s.Load1 }, fmtLoad, false}
	mOther   = metric{"other processes' CPU, cores", func(s *sample) float64 { return s.otherCores() }, fmtLoad, false}
	// Redis' own time a call of each command (INFO commandstats), µs.
	mEvalsha = timedMetric("evalsha")
	mIncrby  = timedMetric("incrby")
	mExpire  = timedMetric("expire")
)

// mLag is an open loop's send lag, p99: how late the load generator
// sent requests after their intended times (in every latency).
var mLag = metric{"send lag p99", func(s *sample) float64 {
	if s.Report.Open == nil {
		return 0
	}
	return s.Report.Open.Lag.P99
}, fmtMicros, false}

// mPlain is the plain script's µs a call (FCALL) beside FastLimit's
// load, mPlainFL FastLimit's EVALSHA µs a call in that phase, and
// mOverPlain the one over the other (plainPhase).
var (
	mPlain     = metric{"plain script's µs a call", func(s *sample) float64 { return s.Plain.Plain.PerCall() }, fmtCallTime, true}
	mPlainFL   = metric{"EVALSHA µs a call beside it", func(s *sample) float64 { return s.Plain.FastLimit.PerCall() }, fmtCallTime, true}
	mOverPlain = metric{"/ the plain script's", func(s *sample) float64 { return s.Plain.ratio() }, fmtRatio, true}
)

// timedMetric is the µs a call of command, from INFO commandstats.
func timedMetric(command string) metric {
	return metric{strings.ToUpper(command) + " µs a call", func(s *sample) float64 { return s.timed(command).PerCall() }, fmtCallTime, true}
}

// counts says whether s counts for m: neither void nor without the Redis
// m reads.
func (m metric) counts(s *sample) bool { return !s.Void && !(m.redis && s.NoRedis) }

// values returns m of each sample that counts for it.
func values(samples []*sample, m metric) []float64 {
	out := make([]float64, 0, len(samples))
	for _, s := range samples {
		if m.counts(s) {
			out = append(out, m.value(s))
		}
	}
	return out
}

// ratios returns m of a's samples over m of b's, round by round, for
// the rounds both have, that count for m, and where b's figure is not
// zero.
func ratios(a, b []*sample, m metric) []float64 {
	var out []float64
	for _, sa := range a {
		for _, sb := range b {
			if sa.Round == sb.Round && m.counts(sa) && m.counts(sb) && m.value(sb) != 0 {
				out = append(out, m.value(sa)/m.value(sb))
			}
		}
	}
	return out
}

// differences returns m of a's samples less m of b's, round by round, for
// the rounds both have and that count for m.
func differences(a, b []*sample, m metric) []float64 {
	var out []float64
	for _, sa := range a {
		for _, sb := range b {
			if sa.Round == sb.Round && m.counts(sa) && m.counts(sb) {
				out = append(out, m.value(sa)-m.value(sb))
			}
		}
	}
	return out
}

// fmtRange prints vs as "lo–hi unit" (or one value when they print the
// same), "" when there are none.
func fmtRange(vs []float64, format func(lo, hi float64) string) string {
	if len(vs) == 0 {
		return ""
	}
	return format(slices.Min(vs), slices.Max(vs))
}

// span joins lo and hi formatted with the same number of decimals.
func span(lo, hi float64, decimals int, unit string) string {
	a := strconv.FormatFloat(lo, 'f', decimals, 64)
	b := strconv.FormatFloat(hi, 'f', decimals, 64)
	if a == b {
		return a + unit
	}
	return a + "–" + b + unit
}

// fmtMicros prints durations given in µs: "480–610 µs", "13.5–17.4 ms".
func fmtMicros(lo, hi float64) string {
	switch {
	case hi < 1000:
		return span(lo, hi, 0, " µs")
	case hi < 10000:
		return span(lo/1000, hi/1000, 2, " ms")
	case hi < 100000:
		return span(lo/1000, hi/1000, 1, " ms")
	}
	return span(lo/1000, hi/1000, 0, " ms")
}

// fmtDiffMicros prints differences of durations given in µs, signed:
// "+0.42–0.97 ms", "-120–+80 µs".
func fmtDiffMicros(lo, hi float64) string {
	unit, scale, decimals := " µs", 1.0, 0
	if math.Max(math.Abs(lo), math.Abs(hi)) >= 1000 {
		unit, scale, decimals = " ms", 1000, 2
	}
	a := strconv.FormatFloat(lo/scale, 'f', decimals, 64)
	b := strconv.FormatFloat(hi/scale, 'f', decimals, 64)
	if lo >= 0 {
		a = "+" + a
	}
	if a == b || a == "+"+b {
		return a + unit
	}
	if lo < 0 && hi >= 0 {
		b = "+" + b
	}
	return a + "–" + b + unit
}

// fmtUS prints one duration in µs, for progress lines.
func fmtUS(v float64) string { return fmtMicros(v, v) }

// fmtCPU prints CPU time per decision in µs: "68–89 µs", "5.2 µs".
func fmtCPU(lo, hi float64) string {
	if hi < 10 {
		return span(lo, hi, 1, " µs")
	}
	return span(lo, hi, 0, " µs")
}

// fmtRate prints decisions per second: "9.4k–12.2k", "850–990".
func fmtRate(lo, hi float64) string {
	switch {
	case hi < 1000:
		return span(lo, hi, 0, "")
	case hi < 100000:
		a, b := strconv.FormatFloat(lo/1000, 'f', 1, 64), strconv.FormatFloat(hi/1000, 'f', 1, 64)
		if a == b {
			return a + "k"
		}
		return a + "k–" + b + "k"
	}
	return span(lo/1000, hi/1000, 0, "k")
}

// fmtRatio prints ratios: "1.62–1.81x".
func fmtRatio(lo, hi float64) string { return span(lo, hi, 2, "x") }

// fmtPercent prints shares as percentages: "87–93 %".
func fmtPercent(lo, hi float64) string { return span(100*lo, 100*hi, 0, " %") }

func fmtCount(lo, hi float64) string { return span(lo, hi, 0, "") }

// fmtPerCall prints counters decided per script call: "19.3–24.0", "" for
// a server that runs no scripts.
func fmtPerCall(lo, hi float64) string {
	if hi == 0 {
		return ""
	}
	return span(lo, hi, 1, "")
}

func fmtLoad(lo, hi float64) string { return span(lo, hi, 2, "") }

// fmtCallTime prints µs a command call: "7.4–9.1 µs", "" with no call.
func fmtCallTime(lo, hi float64) string {
	if hi == 0 {
		return ""
	}
	return span(lo, hi, 1, " µs")
}

// thousands prints n with comma separators: 100,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// fmtSeconds prints a duration in seconds, without decimals past 10 s.
func fmtSeconds(s float64) string {
	if s >= 10 {
		return fmt.Sprintf("%.0f s", math.Round(s))
	}
	return fmt.Sprintf("%.1f s", s)
}
