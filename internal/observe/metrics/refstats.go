package metrics

import "github.com/prometheus/client_golang/prometheus"

// The series of package refstats about the reference's stats.
var (
	refOverflowDef = def{name: "fastlimit_ref_stats_overflow_total", kind: counter,
		when: "the reference's stats on (`USE_PROMETHEUS`, `USE_STATSD` or `USE_DOG_STATSD`)",
		help: "Decisions counted under their rule's configured key (or not at all) because request values had made too many envoyproxy/ratelimit stat keys.",
		see:  "metrics.md#the-references-names"}
	refConflictsDef = def{name: "fastlimit_ref_stats_conflicts_total", kind: counter, when: "`USE_PROMETHEUS`",
		help: "envoyproxy/ratelimit stats not exported because PROMETHEUS_MAPPER_YAML maps them to a name another type of stat uses."}

	refStatsDefs = []*def{&refOverflowDef, &refConflictsDef}
)

// RefStatsOverflow returns a new, unregistered
// fastlimit_ref_stats_overflow_total.
func RefStatsOverflow() prometheus.Counter { return refOverflowDef.counter() }

// RefStatsConflicts returns a new, unregistered
// fastlimit_ref_stats_conflicts_total.
func RefStatsConflicts() prometheus.Counter { return refConflictsDef.counter() }
