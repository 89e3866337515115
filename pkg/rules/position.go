package rules

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// positions are the lines of a descriptor's keys, so that an error NewSet
// reports at the descriptor is moved to the line that holds the mistake.
type positions struct {
	desc  map[string]int // the descriptor's keys
	limit map[string]int // its rate_limit's keys; "" the rate_limit key
	// limits are each limit of rate_limits' keys; "" the limit's line.
	limits []map[string]int
	// moved says which of rate_limit's keys sit at the descriptor's
	// level, for the errors of its limit.
	moved string
}

// keyOf returns the key node of name in mapping n, nil if absent.
func keyOf(n *yaml.Node, name string) *yaml.Node {
	for _, p := range pairs(n) {
		if p.k.Kind == yaml.ScalarNode && p.k.Value == name {
			return p.k
		}
	}
	return nil
}

// valueOf returns the value of name in mapping n, nil if absent.
func valueOf(n *yaml.Node, name string) *yaml.Node {
	for _, p := range pairs(n) {
		if p.k.Kind == yaml.ScalarNode && p.k.Value == name {
			return p.v
		}
	}
	return nil
}

// keyLines returns the line of each key of mapping n.
func keyLines(n *yaml.Node) map[string]int {
	m := map[string]int{}
	if n.Kind != yaml.MappingNode {
		return m
	}
	for _, p := range pairs(n) {
		if _, seen := m[p.k.Value]; !seen && p.k.Kind == yaml.ScalarNode {
			m[p.k.Value] = p.k.Line
		}
	}
	return m
}

// dedented looks among a descriptor's strays for rate_limit's keys. After
// an empty rate_limit they are its children dedented, one error for them
// all, taken out of strays; beside a rate_limit mapping they are
// mentioned in its errors (moved). The reference loads both, without a
// limit or with the keys missing.
func (d *decoder) dedented(n *yaml.Node, strays []stray, at nesting, before int) (rest []stray, moved string) {
	var keys []string
	var lines []string
	var first *yaml.Node
	for _, s := range strays {
		if s.k.Kind == yaml.ScalarNode && belongs(s.k.Value, levelRateLimit) && !belongs(s.k.Value, levelDescriptor) {
			keys = append(keys, s.k.Value)
			lines = append(lines, strconv.Itoa(s.k.Line))
			if first == nil {
				first = s.k
			}
		}
	}
	if at.rateLimit == nil || len(keys) == 0 {
		return strays, ""
	}
	v := valueOf(n, "rate_limit")
	them, are := "it", "is"
	if len(keys) > 1 {
		them, are = "them", "are"
	}
	what := fmt.Sprintf("%s (line %s)", strings.Join(keys, ", "), strings.Join(lines, ", "))
	if len(keys) > 1 {
		what = fmt.Sprintf("%s (lines %s)", strings.Join(keys, ", "), strings.Join(lines, ", "))
	}
	if v != nil && v.ShortTag() == "!!null" {
		d.errorf(first, "rate_limit (line %d) is empty, and %s %s at the descriptor's level: indent %s below rate_limit",
			at.rateLimit.Line, what, followOf(len(keys)), them)
		for _, s := range strays {
			if s.k.Kind != yaml.ScalarNode || !belongs(s.k.Value, levelRateLimit) || belongs(s.k.Value, levelDescriptor) {
				rest = append(rest, s)
			}
		}
		return rest, ""
	}
	moved = fmt.Sprintf("%s %s outside rate_limit (line %d): indent %s below rate_limit", what, are, at.rateLimit.Line, them)
	for _, e := range d.errs[before:] { // this rate_limit's, not a nested descriptor's
		if v != nil && e.Line == v.Line && strings.HasPrefix(e.Msg, "rate_limit has no requests_per_unit") {
			e.Msg += "; " + moved
		}
	}
	return strays, moved
}

func followOf(n int) string {
	if n == 1 {
		return "follows"
	}
	return "follow"
}

// place records the lines of descriptor n's keys under its source, when
// d records positions.
func (d *decoder) place(n *yaml.Node, src, moved string) {
	if d.pos == nil {
		return
	}
	p := &positions{desc: keyLines(n), moved: moved}
	if v := valueOf(n, "rate_limit"); v != nil && v.Kind == yaml.MappingNode {
		p.limit = keyLines(v)
		p.limit[""] = keyOf(n, "rate_limit").Line
	}
	if v := valueOf(n, "rate_limits"); v != nil && v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			m := keyLines(resolve(e))
			m[""] = e.Line
			p.limits = append(p.limits, m)
		}
	}
	d.pos[src] = p
}

// groupMsg matches NewSet's messages about one limit of rate_limits.
var groupMsg = regexp.MustCompile(`^rate_limits\[(\d+)\](: | is missing| replaces )`)

// sameNameMsg matches NewSet's message about two limits of one name.
var sameNameMsg = regexp.MustCompile(`^rate_limits\[\d+\] and rate_limits\[(\d+)\] both count`)

// relocate moves e, an error NewSet reported at a descriptor, to the line
// of the key it is about, and adds where rate_limit's keys went astray.
func relocate(e *Error, pos map[string]*positions) {
	p := pos[e.File+":"+strconv.Itoa(e.Line)]
	if p == nil {
		return
	}
	msg := e.Msg
	line := 0
	switch {
	case strings.HasPrefix(msg, "descriptor has empty key"):
		line = p.desc["key"]
	case strings.HasPrefix(msg, "share_threshold needs"):
		line = p.desc["share_threshold"]
	case strings.HasPrefix(msg, "rate_limits has "):
		line = p.desc["rate_limits"]
	case sameNameMsg.MatchString(msg):
		i, _ := strconv.Atoi(sameNameMsg.FindStringSubmatch(msg)[1])
		line = limitLine(p.limits, i, "")
	case groupMsg.MatchString(msg):
		m := groupMsg.FindStringSubmatch(msg)
		i, _ := strconv.Atoi(m[1])
		switch m[2] {
		case ": ":
			line = limitLine(p.limits, i, limitKey(msg[len(m[0]):]))
			if line == 0 {
				line = limitLine(p.limits, i, "")
			}
		case " replaces ":
			line = limitLine(p.limits, i, "replaces")
		default:
			line = limitLine(p.limits, i, "")
		}
	case p.limit != nil && (limitKey(msg) != "" || strings.HasPrefix(msg, "missing rate limit unit")):
		if line = p.limit[limitKey(msg)]; line == 0 {
			line = p.limit[""]
		}
		if p.moved != "" {
			e.Msg += "; " + p.moved
		}
	}
	if line > 0 {
		e.Line = line
	}
}

// limitLine is the line of key in limit i of rate_limits, 0 if unknown.
func limitLine(limits []map[string]int, i int, key string) int {
	if i < 0 || i >= len(limits) {
		return 0
	}
	return limits[i][key]
}

// limitKey is the key of a rate_limit a message of Limit.Validate (or of
// NewSet's replaces checks) is about; "" for the mapping itself.
func limitKey(msg string) string {
	for _, k := range []struct{ prefix, key string }{
		{"should not specify rate limit unit", "unit"},
		{"invalid rate limit unit", "unit"},
		{"unit_multiplier ", "unit_multiplier"},
		{"cost ", "cost"},
		{"burst ", "burst"},
		{"token_bucket needs requests_per_unit", "requests_per_unit"},
		{"token bucket ", "burst"},
		{"should not have an empty replaces entry", "replaces"},
		{"replaces should not contain", "replaces"},
	} {
		if strings.HasPrefix(msg, k.prefix) {
			return k.key
		}
	}
	return ""
}
