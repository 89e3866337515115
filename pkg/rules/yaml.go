package rules

import (
	"bytes"
	"errors"
	"io"
	"math"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// parseFile decodes one rules file into a domain, returned despite errors
// so that NewSet reports the others; nil if the YAML cannot be decoded.
// domainReported says that an error already reported leaves the domain
// empty (a top-level key that is not a string, as the reference's
// `0.25: test-domain`, or a domain that is not one): NewSet's "empty
// domain" would report the same problem again.
// With places, d also records the lines of each descriptor's keys.
func parseFile(file string, data []byte, places bool) (dc *descriptors.DomainConfig, d *decoder, domainReported bool) {
	root, errs := document(file, data)
	d = &decoder{file: file, errs: errs}
	if places {
		d.pos = map[string]*positions{}
	}
	if errs != nil && root == nil {
		return nil, d, false
	}
	dc = &descriptors.DomainConfig{Source: file + ":1"}
	if root == nil {
		return dc, d, false
	}
	ok, reported := d.domain(root, dc)
	if !ok {
		return nil, d, false
	}
	return dc, d, reported && dc.Name == ""
}

// document parses data, one YAML document, and returns its root node, or
// nil if it is empty or cannot be decoded (which bounds the walk: no cyclic
// or excessive aliases); duplicate keys are only reported.
func document(file string, data []byte) (*yaml.Node, []*Error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxErrors(file, data, err)
	}
	switch err := dec.Decode(&next); {
	case err == nil && root(&next) != nil:
		return nil, []*Error{{File: file, Line: next.Line, Msg: "a rules file holds one YAML document"}}
	case err != nil && !errors.Is(err, io.EOF):
		return nil, syntaxErrors(file, data, err)
	}
	var (
		v  any
		te *yaml.TypeError
	)
	err := doc.Decode(&v)
	if err != nil && !errors.As(err, &te) {
		return nil, yamlErrors(file, err)
	}
	return root(&doc), yamlErrors(file, err)
}

// root returns the content of a document node, or nil if it is empty.
func root(doc *yaml.Node) *yaml.Node {
	if len(doc.Content) == 0 {
		return nil
	}
	if n := resolve(doc.Content[0]); n.ShortTag() != "!!null" {
		return n
	}
	return nil
}

// domain decodes the file's top level into dc; ok false if it is no
// mapping. reported: an error of the domain, or of a top-level key that is
// not a string, was reported.
func (d *decoder) domain(n *yaml.Node, dc *descriptors.DomainConfig) (ok, reported bool) {
	dc.Source = source(d.file, n)
	for _, p := range pairs(n) {
		reported = reported || p.k.Kind == yaml.ScalarNode && p.k.ShortTag() != "!!str"
	}
	ok = d.mapping(n, levelFile, fields{
		"domain": func(v *yaml.Node) {
			before := len(d.errs)
			dc.Name, dc.Source = d.str(v, "domain"), source(d.file, v)
			reported = reported || len(d.errs) > before
		},
		"tenant_key":  func(v *yaml.Node) { dc.TenantKey = d.str(v, "tenant_key") },
		"atomic":      func(v *yaml.Node) { dc.Atomic = d.boolean(v, "atomic") },
		"descriptors": func(v *yaml.Node) { dc.Descriptors = d.descriptors(v) },
	})
	return ok, reported
}

func (d *decoder) descriptors(n *yaml.Node) []descriptors.Descriptor {
	var ds []descriptors.Descriptor
	d.list(n, "descriptors", func(e *yaml.Node) {
		if desc, ok := d.descriptor(e); ok {
			ds = append(ds, desc)
		}
	})
	return ds
}

// descriptor decodes one descriptor; false if it cannot be placed (no
// mapping, or a key that is no string).
func (d *decoder) descriptor(n *yaml.Node) (descriptors.Descriptor, bool) {
	desc := descriptors.Descriptor{Source: source(d.file, n)}
	keyOK := true
	var one, several *yaml.Node // rate_limit and rate_limits
	flag := func(p *bool, name string) func(*yaml.Node) {
		return func(v *yaml.Node) { *p = d.boolean(v, name) }
	}
	outer := d.at
	d.at = nesting{descriptor: n.Line}
	before := len(d.errs)
	fs := fields{
		"key": func(v *yaml.Node) {
			desc.Key, keyOK = d.str(v, "key"), v.Kind == yaml.ScalarNode
		},
		"value":           func(v *yaml.Node) { desc.Value = d.str(v, "value") },
		"rate_limit":      func(v *yaml.Node) { desc.Limit, one = d.rateLimit(v), v },
		"rate_limits":     func(v *yaml.Node) { desc.Limits, several = d.rateLimits(v), v },
		"descriptors":     func(v *yaml.Node) { desc.Descriptors = d.descriptors(v) },
		"metadata":        func(v *yaml.Node) { desc.Metadata = d.metadata(v) },
		"shadow_mode":     flag(&desc.ShadowMode, "shadow_mode"),
		"quota_mode":      flag(&desc.QuotaMode, "quota_mode"),
		"detailed_metric": flag(&desc.DetailedMetric, "detailed_metric"),
		"value_to_metric": flag(&desc.ValueToMetric, "value_to_metric"),
		"share_threshold": flag(&desc.ShareThreshold, "share_threshold"),
	}
	placed, strays := d.fields(n, levelDescriptor, fs)
	d.at = outer
	var at nesting
	if placed && len(strays) > 0 { // for the hints
		at = nesting{rateLimit: keyOf(n, "rate_limit"), rateLimits: keyOf(n, "rate_limits")}
	}
	strays, moved := d.dedented(n, strays, at, before)
	d.strays(levelDescriptor, fs, strays, at)
	if one != nil && several != nil {
		d.errorf(several, "rate_limit and rate_limits on one descriptor; list every limit in rate_limits")
		desc.Limit, desc.Limits = nil, nil
	}
	if placed {
		d.place(n, desc.Source, moved)
	}
	return desc, placed && keyOK
}

// rateLimits decodes a rate_limits list of rate_limit blocks; nil if it
// has errors.
func (d *decoder) rateLimits(n *yaml.Node) []*descriptors.Limit {
	before := len(d.errs)
	var ls []*descriptors.Limit
	d.list(n, "rate_limits", func(e *yaml.Node) { ls = append(ls, d.rateLimit(e)) })
	if len(ls) == 0 && len(d.errs) == before {
		d.errorf(n, "rate_limits: expected at least one limit")
	}
	if len(d.errs) > before {
		return nil
	}
	return ls
}

// rateLimit decodes a rate_limit block, fields left out zero for NewSet to
// default; nil if it has errors, so that NewSet does not repeat them.
func (d *decoder) rateLimit(n *yaml.Node) *descriptors.Limit {
	before := len(d.errs)
	var (
		l        descriptors.Limit
		burst    *yaml.Node
		calendar *yaml.Node
		charge   *yaml.Node
		rpuGiven bool
	)
	d.mapping(n, levelRateLimit, fields{
		"unit": func(v *yaml.Node) { l.Unit = d.unit(v) },
		"requests_per_unit": func(v *yaml.Node) {
			l.RequestsPerUnit, rpuGiven = d.uint32(v, "requests_per_unit"), true
		},
		"unlimited": func(v *yaml.Node) { l.Unlimited = d.boolean(v, "unlimited") },
		"name":      func(v *yaml.Node) { l.Name = d.str(v, "name") },
		"replaces":  func(v *yaml.Node) { l.Replaces = d.replaces(v) },
		"algorithm": func(v *yaml.Node) { l.Algorithm = d.algorithm(v) },
		"unit_multiplier": func(v *yaml.Node) {
			l.UnitMultiplier = uint32(d.positive(v, "unit_multiplier", math.MaxUint32))
		},
		"burst":    func(v *yaml.Node) { l.Burst, burst = d.quantity(v, "burst"), v },
		"cost":     func(v *yaml.Node) { l.Cost = d.quantity(v, "cost") },
		"charge":   func(v *yaml.Node) { l.Charge, charge = d.charge(v), v },
		"calendar": func(v *yaml.Node) { l.Calendar, calendar = d.str(v, "calendar"), v },
	})
	if burst != nil && l.Algorithm != descriptors.TokenBucket {
		d.errorf(burst, "burst needs algorithm: token_bucket")
	}
	if charge != nil && l.Unlimited {
		d.errorf(charge, "charge needs a limit: this one is unlimited")
	}
	if calendar != nil && calendar.Kind == yaml.ScalarNode {
		d.calendar(calendar, &l)
	}
	if !rpuGiven && !l.Unlimited && len(d.errs) == before && n.Kind == yaml.MappingNode {
		d.errorf(n, "rate_limit has no requests_per_unit, so every request would be over the limit: "+
			"set requests_per_unit (0 to refuse every request), or unlimited: true")
	}
	if len(d.errs) > before {
		return nil
	}
	return &l
}

func (d *decoder) uint32(n *yaml.Node, name string) uint32 {
	i, _ := d.integer(n, name, math.MaxUint32)
	return uint32(i)
}

func (d *decoder) unit(n *yaml.Node) descriptors.Unit {
	s := d.str(n, "unit")
	u, ok := descriptors.ParseUnit(s)
	if !ok && n.Kind == yaml.ScalarNode {
		d.errorf(n, "invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", s)
	}
	return u
}

func (d *decoder) charge(n *yaml.Node) descriptors.Charge {
	s := d.str(n, "charge")
	c, ok := descriptors.ParseCharge(s)
	if !ok && n.Kind == yaml.ScalarNode {
		d.errorf(n, "unknown charge '%s' (want when_allowed or always)", s)
	}
	return c
}

// calendar checks a limit's calendar, at its line: a time zone, with a
// unit of a day or longer, on a window (descriptors.Limit.Validate checks
// it again, for limits that come from elsewhere).
func (d *decoder) calendar(n *yaml.Node, l *descriptors.Limit) {
	switch {
	case l.Unlimited:
		d.errorf(n, "calendar needs a limit: this one is unlimited")
	case l.Algorithm == descriptors.TokenBucket:
		d.errorf(n, "calendar needs fixed_window or sliding_window: a token bucket has no windows")
	case l.Unit == descriptors.UnitUnknown:
		// "missing rate limit unit", from NewSet
	default:
		if _, err := descriptors.NewCalendar(l.Calendar, l.Unit, l.UnitMultiplier); err != nil {
			d.errorf(n, "%s", err)
		}
	}
}

func (d *decoder) algorithm(n *yaml.Node) descriptors.Algorithm {
	s := d.str(n, "algorithm")
	a, ok := descriptors.ParseAlgorithm(s)
	if !ok && n.Kind == yaml.ScalarNode {
		d.errorf(n, "unknown algorithm '%s' (want fixed_window, sliding_window or token_bucket)", s)
	}
	return a
}

// replaces decodes a list of {name: X}, keeping an empty name for NewSet.
func (d *decoder) replaces(n *yaml.Node) []string {
	var names []string
	d.list(n, "replaces", func(e *yaml.Node) {
		var name string
		d.mapping(e, levelReplaces, fields{
			"name": func(v *yaml.Node) { name = d.str(v, "name") },
		})
		names = append(names, name)
	})
	return names
}

// metadata decodes free-form metadata into the types structpb.NewStruct takes.
func (d *decoder) metadata(n *yaml.Node) map[string]any {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "metadata: expected a mapping, got %s", describe(n))
		return nil
	}
	m, _ := d.value(n).(map[string]any)
	return m
}

func (d *decoder) value(n *yaml.Node) any {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for _, p := range pairs(n) {
			if p.k.Kind != yaml.ScalarNode {
				d.errorf(p.k, "metadata: keys must be strings, got %s", describe(p.k))
				continue
			}
			if _, seen := m[p.k.Value]; !seen {
				m[p.k.Value] = d.value(p.v)
			}
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, e := range n.Content {
			l[i] = d.value(resolve(e))
		}
		return l
	}
	switch n.ShortTag() {
	case "!!int", "!!float", "!!bool", "!!null":
		var v any
		_ = n.Decode(&v) // document already decoded the whole file
		return v
	}
	return n.Value // strings, and timestamps and binaries as written
}
