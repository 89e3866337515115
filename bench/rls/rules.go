package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Where writeRules puts each server's rules, under the run's directory.
const (
	fastlimitRulesDir  = "fastlimit"  // --config
	referenceRulesRoot = "reference"  // RUNTIME_ROOT
	referenceRulesSub  = "ratelimit"  // RUNTIME_SUBDIRECTORY
	rulesDomain        = "bench"      // the domain of every request
	rulesFile          = "bench.yaml" // in each directory
	neverDeny          = "4000000000" // a second's limit no run reaches
	rulesHeader        = "# Written by bench/rls for one run; edits are lost.\n"
	rulesDescription   = "limits of 4e9 a second that never deny"
)

// rule is one descriptor of the bench domain: the key a scenario sends.
type rule struct {
	key       string
	title     string // what a scenario on it measures
	algorithm string // FastLimit's algorithm field; "" is the fixed window both servers have
	unit      string // "" is second
	unlimited bool
}

// benchRules are the bench domain. Both servers get the same YAML for the rules
// they both know (unlimited and fixed window); the others are FastLimit's.
// No limit is ever reached, so every request does the same store work
// whatever the keyspace.
var benchRules = []rule{
	{key: "unlimited", title: "`unlimited` (no store)", unlimited: true},
	{key: "fw", title: "fixed window"},
	{key: "fwm", title: "fixed window per minute", unit: "minute"},
	{key: "sw", title: "sliding window", algorithm: "sliding_window"},
	{key: "tb", title: "token bucket", algorithm: "token_bucket"},
	{key: "swm", title: "sliding window per minute", algorithm: "sliding_window", unit: "minute"},
	{key: "tbm", title: "token bucket per minute", algorithm: "token_bucket", unit: "minute"},
}

// ruleByKey returns the rule of key; scenarios name only keys of rules.
func ruleByKey(key string) (rule, bool) {
	for _, r := range benchRules {
		if r.key == key {
			return r, true
		}
	}
	return rule{}, false
}

// rulesYAML returns the bench domain's rules for a server that knows
// every algorithm (all) or fixed windows only.
func rulesYAML(all bool) string {
	var b strings.Builder
	b.WriteString(rulesHeader)
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", rulesDomain)
	for _, r := range benchRules {
		if r.algorithm != "" && !all {
			continue
		}
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit:\n", r.key)
		if r.unlimited {
			b.WriteString("      unlimited: true\n")
			continue
		}
		if r.algorithm != "" {
			fmt.Fprintf(&b, "      algorithm: %s\n", r.algorithm)
		}
		unit := r.unit
		if unit == "" {
			unit = "second"
		}
		fmt.Fprintf(&b, "      unit: %s\n      requests_per_unit: %s\n", unit, neverDeny)
	}
	return b.String()
}

// writeRules writes FastLimit's rules to dir/fastlimit/bench.yaml and the
// reference's to dir/reference/ratelimit/config/bench.yaml.
func writeRules(dir string) error {
	for path, text := range map[string]string{
		filepath.Join(dir, fastlimitRulesDir, rulesFile):                               rulesYAML(true),
		filepath.Join(dir, referenceRulesRoot, referenceRulesSub, "config", rulesFile): rulesYAML(false),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
