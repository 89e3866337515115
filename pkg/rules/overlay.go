package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// Overlay holds FastLimit's extensions for rules that come without them,
// as rules over xDS do (the RateLimitConfig proto has no field for them):
// per domain and descriptor path, the extension fields only
// (docs/xds.md#fastlimits-extensions-over-xds). ParseOverlay reads one,
// FromXDSWith applies it. An Overlay is immutable.
type Overlay struct {
	File string
	// Hash is the hex SHA-256 of the file's content.
	Hash    string
	domains []extDomain
}

// extDomain is an overlay's entry for one domain.
type extDomain struct {
	name        string
	line        int
	tenantKey   *string
	atomic      *bool
	descriptors []extDescriptor
}

// extDescriptor is an overlay's entry for one descriptor, by key and value.
type extDescriptor struct {
	key, value  string
	line        int
	ext         descriptorExt
	descriptors []extDescriptor
}

// descriptorExt are the extension fields of a descriptor and its limit;
// nil fields are not set.
type descriptorExt struct {
	valueToMetric, shareThreshold *bool
	limit                         *limitExt
	limitLine                     int
}

// limitExt are the extension fields of a rate_limit.
type limitExt struct {
	algorithm      *descriptors.Algorithm
	unitMultiplier *uint32
	burst, cost    *int64
	charge         *descriptors.Charge
	calendar       *string
}

// overlayOnly names the keys an overlay refuses: they come from the
// snapshot.
const overlayOnly = "the overlay holds FastLimit's extensions only: %s comes from the rules over xDS"

// LoadOverlay reads and parses the overlay file at path.
func LoadOverlay(path string) (*Overlay, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read rules overlay: %w", err)
	}
	return ParseOverlay(path, b)
}

// ParseOverlay parses an overlay file named file (docs/xds.md):
//
//	domains:
//	  - domain: default/eg/http
//	    descriptors:
//	      - key: route
//	        value: r1
//	        descriptors:
//	          - key: user
//	            rate_limit: {algorithm: token_bucket, burst: 20}
//
// Strictly: any key but the extensions, domain, key, value and descriptors
// is an error. Errors are *Error values joined with errors.Join.
func ParseOverlay(file string, data []byte) (*Overlay, error) {
	sum := sha256.Sum256(data)
	o := &Overlay{File: file, Hash: hex.EncodeToString(sum[:])}
	root, errs := document(file, data)
	d := &decoder{file: file, errs: errs, strict: true}
	if root != nil {
		d.mapping(root, "rules overlay", fields{
			"domains": func(v *yaml.Node) {
				d.list(v, "domains", func(e *yaml.Node) {
					if dom, ok := d.extDomain(e); ok {
						o.domains = append(o.domains, dom)
					}
				})
			},
		})
	}
	if len(d.errs) > 0 {
		return nil, join(d.errs)
	}
	return o, nil
}

func (d *decoder) extDomain(n *yaml.Node) (extDomain, bool) {
	dom := extDomain{line: n.Line}
	ok := d.mapping(n, "overlay domain", fields{
		"domain":      func(v *yaml.Node) { dom.name = d.str(v, "domain") },
		"tenant_key":  func(v *yaml.Node) { s := d.str(v, "tenant_key"); dom.tenantKey = &s },
		"atomic":      func(v *yaml.Node) { b := d.boolean(v, "atomic"); dom.atomic = &b },
		"descriptors": func(v *yaml.Node) { dom.descriptors = d.extDescriptors(v) },
	})
	if ok && dom.name == "" && n.Kind == yaml.MappingNode {
		d.errorf(n, "overlay domain: domain is missing or empty")
	}
	return dom, ok
}

func (d *decoder) extDescriptors(n *yaml.Node) []extDescriptor {
	var ds []extDescriptor
	d.list(n, "descriptors", func(e *yaml.Node) {
		ed := extDescriptor{line: e.Line}
		fs := fields{
			"key":         func(v *yaml.Node) { ed.key = d.str(v, "key") },
			"value":       func(v *yaml.Node) { ed.value = d.str(v, "value") },
			"descriptors": func(v *yaml.Node) { ed.descriptors = d.extDescriptors(v) },
		}
		for k, f := range d.extFields(&ed.ext) {
			fs[k] = f
		}
		for _, k := range []string{"rate_limits", "shadow_mode", "quota_mode", "detailed_metric", "metadata"} {
			fs[k] = func(v *yaml.Node) { d.errorf(v, overlayOnly, k) }
		}
		if d.mapping(e, levelDescriptor, fs) && e.Kind == yaml.MappingNode {
			if ed.key == "" {
				d.errorf(e, "overlay descriptor: key is missing or empty")
			}
			ds = append(ds, ed)
		}
	})
	return ds
}

// extFields are the decoders of a descriptor's extension fields into x;
// the overlay and a descriptor's metadata share them.
func (d *decoder) extFields(x *descriptorExt) fields {
	flag := func(p **bool, name string) func(*yaml.Node) {
		return func(v *yaml.Node) { b := d.boolean(v, name); *p = &b }
	}
	return fields{
		"value_to_metric": flag(&x.valueToMetric, "value_to_metric"),
		"share_threshold": flag(&x.shareThreshold, "share_threshold"),
		"rate_limit":      func(v *yaml.Node) { x.limit, x.limitLine = d.limitExt(v), v.Line },
	}
}

// limitExt decodes a rate_limit of extension fields; nil if it has errors.
func (d *decoder) limitExt(n *yaml.Node) *limitExt {
	before := len(d.errs)
	var l limitExt
	var burst *yaml.Node
	fs := fields{
		"algorithm": func(v *yaml.Node) { a := d.algorithm(v); l.algorithm = &a },
		"unit_multiplier": func(v *yaml.Node) {
			m := uint32(d.positive(v, "unit_multiplier", math.MaxUint32))
			l.unitMultiplier = &m
		},
		"burst":    func(v *yaml.Node) { b := d.quantity(v, "burst"); l.burst, burst = &b, v },
		"cost":     func(v *yaml.Node) { c := d.quantity(v, "cost"); l.cost = &c },
		"charge":   func(v *yaml.Node) { c := d.charge(v); l.charge = &c },
		"calendar": func(v *yaml.Node) { c := d.str(v, "calendar"); l.calendar = &c },
	}
	for _, k := range []string{"unit", "requests_per_unit", "unlimited", "name", "replaces"} {
		fs[k] = func(v *yaml.Node) { d.errorf(v, overlayOnly, k) }
	}
	d.mapping(n, levelRateLimit, fs)
	if burst != nil && (l.algorithm == nil || *l.algorithm != descriptors.TokenBucket) {
		d.errorf(burst, "burst needs algorithm: token_bucket")
	}
	if len(d.errs) > before {
		return nil
	}
	return &l
}

// Domains returns the number of domains the overlay extends.
func (o *Overlay) Domains() int {
	if o == nil {
		return 0
	}
	return len(o.domains)
}

// apply extends domains with the overlay's fields, returning a warning
// for each entry that extends nothing. It copies what it changes: the
// limits of domains may be shared.
func (o *Overlay) apply(domains []descriptors.DomainConfig) (warns []*Error, unmatched int) {
	if o == nil {
		return nil, 0
	}
	for _, od := range o.domains {
		i := -1
		for j := range domains {
			if domains[j].Name == od.name {
				i = j
			}
		}
		if i < 0 {
			warns = append(warns, &Error{File: o.File, Line: od.line, Msg: fmt.Sprintf(
				"no domain '%s' in the rules from xDS: nothing to extend", od.name)})
			unmatched++
			continue
		}
		dc := &domains[i]
		if od.tenantKey != nil {
			dc.TenantKey = *od.tenantKey
		}
		if od.atomic != nil {
			dc.Atomic = *od.atomic
		}
		w, n := o.applyDescriptors(dc.Name, dc.Descriptors, od.descriptors)
		warns, unmatched = append(warns, w...), unmatched+n
	}
	return warns, unmatched
}

// applyDescriptors extends the descriptors ds, below path, with eds.
func (o *Overlay) applyDescriptors(path string, ds []descriptors.Descriptor, eds []extDescriptor) (warns []*Error, unmatched int) {
	for _, ed := range eds {
		p := path + "." + ed.key
		if ed.value != "" {
			p += "_" + ed.value
		}
		i := -1
		for j := range ds {
			if ds[j].Key == ed.key && ds[j].Value == ed.value {
				i = j
				break
			}
		}
		if i < 0 {
			warns = append(warns, &Error{File: o.File, Line: ed.line, Msg: fmt.Sprintf(
				"no descriptor %s in the rules from xDS: nothing to extend", p)})
			unmatched++
			continue
		}
		d := &ds[i]
		if err := ed.ext.extend(d); err != "" {
			warns = append(warns, &Error{File: o.File, Line: ed.ext.limitLine, Msg: fmt.Sprintf("descriptor %s %s", p, err)})
			unmatched++
		}
		d.Source += " (extended by " + o.File + ":" + strconv.Itoa(ed.line) + ")"
		w, n := o.applyDescriptors(p, d.Descriptors, ed.descriptors)
		warns, unmatched = append(warns, w...), unmatched+n
	}
	return warns, unmatched
}

// extend sets x's fields on d, copying its limit; it says why the limit's
// fields extend nothing, if they do not.
func (x *descriptorExt) extend(d *descriptors.Descriptor) string {
	if x.valueToMetric != nil {
		d.ValueToMetric = *x.valueToMetric
	}
	if x.shareThreshold != nil {
		d.ShareThreshold = *x.shareThreshold
	}
	if x.limit == nil {
		return ""
	}
	if d.Limit == nil {
		return "has no rate_limit in the rules from xDS: its rate_limit extensions apply to nothing"
	}
	l := *d.Limit
	if x.limit.algorithm != nil {
		l.Algorithm = *x.limit.algorithm
	}
	if x.limit.unitMultiplier != nil {
		l.UnitMultiplier = *x.limit.unitMultiplier
	}
	if x.limit.burst != nil {
		l.Burst = *x.limit.burst
	}
	if x.limit.cost != nil {
		l.Cost = *x.limit.cost
	}
	if x.limit.charge != nil {
		l.Charge = *x.limit.charge
	}
	if x.limit.calendar != nil {
		l.Calendar = *x.limit.calendar
	}
	d.Limit = &l
	return ""
}

// metadataKey is the key of a descriptor's metadata Struct that carries
// its extension fields over xDS; it is not sent in dynamic metadata.
const metadataKey = "fastlimit"

// metadataExt decodes the extension fields a descriptor's metadata
// carries under metadataKey, as the overlay's (numbers as structpb gives
// them). source names the descriptor in errors.
func metadataExt(source string, v any) (*descriptorExt, []*Error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, []*Error{{File: source, Msg: "metadata." + metadataKey + ": " + err.Error()}}
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil || len(n.Content) == 0 {
		return nil, []*Error{{File: source, Msg: "metadata." + metadataKey + ": expected a mapping"}}
	}
	d := &decoder{file: source, strict: true}
	x := &descriptorExt{}
	d.mapping(resolve(n.Content[0]), metadataKey, d.extFields(x))
	for _, e := range d.errs { // lines of the marshalled text mean nothing
		e.Line, e.Msg = 0, "metadata."+metadataKey+": "+strings.TrimPrefix(e.Msg, "invalid YAML: ")
	}
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return x, nil
}
