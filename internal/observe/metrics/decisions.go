package metrics

// ruleLabels label the rule counters.
var ruleLabels = []string{"domain", "rule"}

// The series of decisions (Metrics as an rls.Observer).
var (
	ruleHitsDef = def{name: "fastlimit_rule_total_hits_total", kind: counter, labels: ruleLabels,
		help: "Hits charged against the rule, in requests."}
	ruleWithinDef = def{name: "fastlimit_rule_within_limit_total", kind: counter, labels: ruleLabels,
		help: "Hits allowed by the rule."}
	ruleNearDef = def{name: "fastlimit_rule_near_limit_total", kind: counter, labels: ruleLabels,
		help: "Hits allowed with the rule's remaining at or below the near-limit share."}
	ruleOverDef = def{name: "fastlimit_rule_over_limit_total", kind: counter, labels: ruleLabels,
		help: "Hits over the rule's limit, shadowed ones included."}
	ruleShadowDef = def{name: "fastlimit_rule_shadow_mode_total", kind: counter, labels: ruleLabels,
		help: "Hits over the rule's limit that shadow mode let through."}
	ruleRefundedDef = def{name: "fastlimit_rule_refunded_hits_total", kind: counter, labels: ruleLabels,
		help: "Hits given back to the rule by descriptors with is_negative_hits; not counted in total_hits_total.",
		see:  "rules.md#refunds-is_negative_hits"}
	requestsDef = def{name: "fastlimit_requests_total", kind: counter, labels: []string{"code"},
		help: "Rate-limit requests by result: OK, OVER_LIMIT, INVALID_ARGUMENT, UNAVAILABLE, or UNKNOWN before the first rules from xDS.",
		see:  "xds.md#before-the-first-snapshot"}
	durationDef = def{name: "fastlimit_request_duration_seconds", kind: histogram,
		help:    "Time to decide a rate-limit request, store round trip included.",
		buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}}
	globalShadowDef = def{name: "fastlimit_global_shadow_mode_total", kind: counter,
		help: "Requests over limit that global shadow mode (--shadow-mode) answered OK."}
	storeErrorsDef = def{name: "fastlimit_store_errors_total", kind: counter,
		help: "Requests that failed because the store did not answer, or answered with an error."}
	unmatchedDef = def{name: "fastlimit_unmatched_descriptors_total", kind: counter, labels: []string{"domain"},
		help: "Descriptors that no rule matched (so nothing limited them), by domain; domains without rules count as \"other\"."}
	detailedFoldedDef = def{name: "fastlimit_rule_detailed_series_folded_total", kind: counter,
		help: "Decisions of detailed_metric and value_to_metric rules counted under the rule's path, because --max-detailed-metric-series request-labelled series existed."}
)

// The series of the rules in force and their loads (Metrics as a load
// observer).
var (
	loadsDef = def{name: "fastlimit_config_loads_total", kind: counter, labels: []string{"result"},
		help: "Loads of the rules directory (or xDS snapshots) by result: success or failure. A failed reload keeps the rules in force."}
	infoDef = def{name: "fastlimit_config_info", kind: gauge, labels: []string{"hash"},
		help: "The rules in force: 1, labelled with their hash (SHA-256 of the files' or xDS resources' names and contents)."}
	lastOKDef = def{name: "fastlimit_config_last_reload_successful", kind: gauge,
		help: "1 if the last load of the rules directory (or xDS snapshot) succeeded, 0 if it failed and older rules are in force."}
	lastOKTimeDef = def{name: "fastlimit_config_last_reload_success_timestamp_seconds", kind: gauge,
		help: "When the rules directory (or an xDS snapshot) last loaded successfully, in Unix seconds."}
	limitsDef = def{name: "fastlimit_config_limits", kind: gauge,
		help: "Limits in the rules in force."}
	warningsDef = def{name: "fastlimit_config_warnings", kind: gauge,
		help: "Warnings of the rules in force: keys ignored as envoyproxy/ratelimit ignores them, entries of --rules-overlay that extend nothing (each is logged at warn, and listed by /v1/rules).",
		see:  "rules.md#errors-and-warnings"}
	overlayUnmatchedDef = def{name: "fastlimit_config_overlay_unmatched", kind: gauge,
		help: "Entries of --rules-overlay (domains, descriptor paths, rate_limit extensions) that extend nothing in the rules over xDS in force.",
		see:  "xds.md#fastlimits-extensions-over-xds"}
	removedDef = def{name: "fastlimit_config_domains_removed_total", kind: counter,
		help: "Domains that a load of the rules removed: their requests are no longer limited (each is logged at warn).",
		see:  "operations.md#hot-reload"}
)

// buildInfoDef is RegisterBuildInfo's.
var buildInfoDef = def{name: "fastlimit_build_info", kind: gauge, labels: []string{"version", "goversion"},
	help: "The running build: 1, labelled with its version and Go version."}

var (
	decisionDefs = []*def{&ruleHitsDef, &ruleWithinDef, &ruleNearDef, &ruleOverDef, &ruleShadowDef, &ruleRefundedDef,
		&requestsDef, &durationDef, &globalShadowDef, &storeErrorsDef, &unmatchedDef, &detailedFoldedDef}
	configDefs = []*def{&loadsDef, &infoDef, &lastOKDef, &lastOKTimeDef, &limitsDef, &warningsDef, &overlayUnmatchedDef, &removedDef}
	buildDefs  = []*def{&buildInfoDef}
)
