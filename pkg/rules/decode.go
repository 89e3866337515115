package rules

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// maxQuantity bounds burst and cost, below descriptors.MaxExact in milli-requests.
const maxQuantity = descriptors.MaxExact/descriptors.Milli - 1

// decoder maps the YAML nodes of one file onto plain values, recording
// every error; its methods take resolved nodes and treat bad values as absent.
type decoder struct {
	file  string
	errs  []*Error
	warns []*Error // what loads, ignored (the reference's keys where they mean nothing)
	// strict refuses the reference's keys where they mean nothing, as
	// unknown keys (an overlay).
	strict bool
	at     nesting               // around the mapping decoded, for hints
	pos    map[string]*positions // by descriptor Source, to place NewSet's errors
}

// fields maps the keys a mapping allows to their decoders; null is absent.
type fields map[string]func(v *yaml.Node)

func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) warnf(n *yaml.Node, format string, args ...any) {
	d.warns = append(d.warns, &Error{File: d.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

// mapping calls fs for the keys of n, a mapping of level what, reporting
// the keys it does not know (strays); of a repeated or merged key, YAML's
// winner. It reports false if n is not a mapping.
func (d *decoder) mapping(n *yaml.Node, what string, fs fields) bool {
	ok, strays := d.fields(n, what, fs)
	d.strays(what, fs, strays, d.at)
	return ok
}

// fields is mapping, its strays returned to be reported.
func (d *decoder) fields(n *yaml.Node, what string, fs fields) (bool, []stray) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s: expected a mapping, got %s", what, describe(n))
		return false, nil
	}
	seen := make(map[string]bool, len(fs))
	var strays []stray
	for _, p := range pairs(n) {
		name := p.k.Value
		if seen[name] {
			continue
		}
		seen[name] = true
		f, ok := fs[name]
		switch {
		case p.k.Kind == yaml.ScalarNode && p.k.ShortTag() != "!!str":
			d.errorf(p.k, "key %s is %s, not a string; the keys here are %s", name, describe(p.k), strings.Join(slices.Sorted(maps.Keys(fs)), ", "))
		case !ok || p.k.Kind != yaml.ScalarNode:
			strays = append(strays, stray{p.k, p.v})
		case p.v.ShortTag() != "!!null":
			f(p.v)
		}
	}
	return true, strays
}

// strays reports the keys a mapping of level does not know: one of the
// reference's keys is ignored with a warning, as the reference ignores
// it (unless strict), any other is an error; each says where it belongs
// or what it may misspell.
func (d *decoder) strays(level string, fs fields, ss []stray, at nesting) {
	for _, s := range ss {
		key := s.k.Value
		if s.k.Kind != yaml.ScalarNode {
			d.errorf(s.k, "unknown key '%s'", key)
			continue
		}
		h := hint(key, level, at)
		if !d.strict && refKeys[key] {
			msg := fmt.Sprintf("'%s' means nothing in %s and is ignored, as envoyproxy/ratelimit ignores it", key, an(level))
			if h != "" {
				msg += "; " + h
			}
			d.warnf(s.k, "%s", msg)
			continue
		}
		msg := fmt.Sprintf("unknown key '%s'", key)
		switch sug, home := suggest(key, slices.Sorted(maps.Keys(fs))); {
		case h != "":
			msg += " in " + an(level) + "; " + h
		case sug != "" && home != "":
			msg += fmt.Sprintf("; did you mean '%s' (a key of %s)?", sug, an(home))
		case sug != "":
			msg += fmt.Sprintf("; did you mean '%s'?", sug)
		}
		d.errorf(s.k, "%s", msg)
	}
}

// list calls each for the elements of n, a list named what.
func (d *decoder) list(n *yaml.Node, what string, each func(*yaml.Node)) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s: expected a list, got %s", what, describe(n))
		return
	}
	for _, e := range n.Content {
		each(resolve(e))
	}
}

type pair struct{ k, v *yaml.Node }

// pairs returns mapping n's entries, values resolved, merge keys ("<<")
// expanded after the explicit ones: the first of each key wins.
func pairs(n *yaml.Node) []pair {
	var own, merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.ShortTag() != "!!merge" {
			own = append(own, pair{k, v})
			continue
		}
		from := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			from = v.Content
		}
		for _, m := range from {
			if m = resolve(m); m.Kind == yaml.MappingNode {
				merged = append(merged, pairs(m)...)
			}
		}
	}
	return append(own, merged...)
}

// resolve follows aliases to the anchored node.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describe names the type of a node for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	}
	return "a " + strings.TrimPrefix(n.ShortTag(), "!!")
}

// str returns a scalar's text: any scalar, as the reference takes "404".
func (d *decoder) str(n *yaml.Node, name string) string {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, "%s: expected a string, got %s", name, describe(n))
		return ""
	}
	return n.Value
}

func (d *decoder) boolean(n *yaml.Node, name string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		d.errorf(n, "%s: expected a boolean, got %s", name, describe(n))
	}
	return b
}

// integer returns an integer in [0, max], or 0 and false after recording why not.
func (d *decoder) integer(n *yaml.Node, name string, max uint64) (uint64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.errorf(n, "%s: expected an integer, got %s", name, describe(n))
		return 0, false
	}
	var i int64
	err := n.Decode(&i) // fails only above math.MaxInt64
	switch {
	case err == nil && i < 0:
		d.errorf(n, "%s must not be negative", name)
	case err != nil || uint64(i) > max:
		d.errorf(n, "%s %s is larger than %d", name, n.Value, max)
	default:
		return uint64(i), true
	}
	return 0, false
}

// positive is integer without zero.
func (d *decoder) positive(n *yaml.Node, name string, max uint64) uint64 {
	i, ok := d.integer(n, name, max)
	if ok && i == 0 {
		d.errorf(n, "%s must be positive", name)
	}
	return i
}

// quantity returns a positive number of requests of at most three decimals
// (a cost of 0.5) in milli-requests, parsed exactly from the text.
func (d *decoder) quantity(n *yaml.Node, name string) int64 {
	if n.ShortTag() == "!!int" {
		return int64(d.positive(n, name, maxQuantity)) * descriptors.Milli
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
		d.errorf(n, "%s: expected a number, got %s", name, describe(n))
		return 0
	}
	m, err := parseMilli(strings.ReplaceAll(n.Value, "_", ""))
	if err == nil && m == 0 {
		err = errors.New("must be positive")
	}
	if err != nil {
		d.errorf(n, "%s %s", name, err)
	}
	return m
}

// parseMilli parses a decimal of at most three decimals into thousandths.
func parseMilli(s string) (int64, error) {
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("must not be negative")
	}
	whole, frac, _ := strings.Cut(strings.TrimPrefix(s, "+"), ".")
	if whole+frac == "" || !isDigits(whole) || !isDigits(frac) {
		return 0, fmt.Errorf("'%s' is not a decimal number", s)
	}
	if len(frac) > 3 {
		return 0, fmt.Errorf("'%s' has more than 3 decimals", s)
	}
	m, err := strconv.ParseInt(whole+frac+strings.Repeat("0", 3-len(frac)), 10, 64)
	if err != nil || m > maxQuantity*descriptors.Milli {
		return 0, fmt.Errorf("%s is larger than %d", s, maxQuantity)
	}
	return m, nil
}

func isDigits(s string) bool {
	return strings.Trim(s, "0123456789") == ""
}
