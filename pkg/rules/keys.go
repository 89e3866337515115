package rules

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The mappings of a rules file, as errors and hints name them.
const (
	levelFile       = "rules file"
	levelDescriptor = "descriptor"
	levelRateLimit  = "rate_limit"
	levelReplaces   = "replaces entry"
)

// refKeys is envoyproxy/ratelimit's one set of valid keys (its
// config_impl.go validKeys): it accepts each of them in any mapping of a
// rules file, and ignores those a mapping has no field for.
var refKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true,
}

// homes is where each key of a rules file belongs, for the hints of keys
// found elsewhere; descriptors belongs in the file and in a descriptor,
// name in a rate_limit and a replaces entry. TestHomes holds it to the
// decoder's fields.
var homes = map[string][]string{
	"domain": {levelFile}, "tenant_key": {levelFile}, "atomic": {levelFile},
	"descriptors": {levelFile, levelDescriptor},
	"key":         {levelDescriptor}, "value": {levelDescriptor}, "rate_limit": {levelDescriptor},
	"rate_limits": {levelDescriptor}, "metadata": {levelDescriptor}, "shadow_mode": {levelDescriptor},
	"quota_mode": {levelDescriptor}, "detailed_metric": {levelDescriptor}, "value_to_metric": {levelDescriptor},
	"share_threshold": {levelDescriptor},
	"unit":            {levelRateLimit}, "requests_per_unit": {levelRateLimit}, "unlimited": {levelRateLimit},
	"replaces": {levelRateLimit}, "algorithm": {levelRateLimit}, "unit_multiplier": {levelRateLimit},
	"burst": {levelRateLimit}, "cost": {levelRateLimit}, "charge": {levelRateLimit}, "calendar": {levelRateLimit},
	"name": {levelRateLimit, levelReplaces},
}

// stray is a key a mapping does not know.
type stray struct {
	k, v *yaml.Node
}

// belongs reports whether key is a key of level.
func belongs(key, level string) bool { return slices.Contains(homes[key], level) }

// suggest returns the key of known (or, failing that, of any level) that
// key most likely misspells, and its level; "" when none is close.
func suggest(key string, known []string) (string, string) {
	if s := closest(key, known); s != "" {
		return s, ""
	}
	all := make([]string, 0, len(homes))
	for k := range homes {
		all = append(all, k)
	}
	slices.Sort(all)
	if s := closest(key, all); s != "" {
		return s, homes[s][0]
	}
	return "", ""
}

// closest returns the candidate nearest key: the same once case, '_',
// '-' and spaces are ignored, or within an edit distance of 2 (1 for
// short keys); "" when none is.
func closest(key string, candidates []string) string {
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '_' || r == '-' || r == ' ' {
				return -1
			}
			return r
		}, strings.ToLower(s))
	}
	nk := norm(key)
	best, bestD := "", 3
	if len(key) <= 4 {
		bestD = 2
	}
	for _, c := range candidates {
		if c == key {
			continue
		}
		if norm(c) == nk {
			return c
		}
		if d := distance(nk, norm(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b (edits,
// transpositions counted as one), bytes compared.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// nesting is what the decoder knows of the mappings around a stray key,
// for the hint of where it belongs.
type nesting struct {
	// rateLimit is the descriptor's rate_limit key, rateLimits its
	// rate_limits key; descriptor the line of the descriptor around a
	// rate_limit.
	rateLimit, rateLimits *yaml.Node
	descriptor            int
}

// hint says where key, found in a mapping of level, belongs; "" when it
// belongs nowhere else.
func hint(key, level string, at nesting) string {
	hs := homes[key]
	if len(hs) == 0 || slices.Contains(hs, level) {
		return ""
	}
	home := hs[0] // the nearest home: a descriptor's and a rate_limit's keys are each other's neighbours
	for _, h := range hs {
		if h == levelDescriptor && level == levelRateLimit || h == levelRateLimit && level == levelDescriptor {
			home = h
		}
	}
	switch {
	case key == "name" && level == levelFile: // a RateLimitConfig's, as Envoy Gateway's dumps carry it
		return ""
	case home == levelRateLimit && level == levelDescriptor && at.rateLimit != nil:
		return fmt.Sprintf("%s belongs in rate_limit (line %d): indent it below rate_limit", key, at.rateLimit.Line)
	case home == levelRateLimit && level == levelDescriptor && at.rateLimits != nil:
		return fmt.Sprintf("%s belongs in a limit of rate_limits (line %d)", key, at.rateLimits.Line)
	case home == levelRateLimit:
		return fmt.Sprintf("%s belongs in a descriptor's rate_limit", key)
	case home == levelDescriptor && level == levelRateLimit && at.descriptor > 0:
		return fmt.Sprintf("%s belongs to the descriptor (line %d), beside rate_limit: indent it less", key, at.descriptor)
	case home == levelDescriptor:
		return fmt.Sprintf("%s belongs in a descriptor, an item of a descriptors list", key)
	case home == levelFile:
		return fmt.Sprintf("%s belongs at the top of the rules file", key)
	}
	return ""
}

// an names a mapping of level for messages: "a descriptor".
func an(level string) string {
	if level == levelFile {
		return "a rules file's top level"
	}
	return "a " + level
}
