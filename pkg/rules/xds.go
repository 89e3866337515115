package rules

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// FromXDS compiles the RateLimitConfig resources of one xDS snapshot as
// envoyproxy/ratelimit reads them, one domain each, in the order of their
// names (docs/xds.md). No resources compile to rules without domains. Errors
// are *Error values joined with errors.Join, each with Line 0 and File
// naming the resource and descriptor path, as in "resource 'rl' descriptor
// d.k_v (descriptors[0])".
func FromXDS(resources []*rlsconf.RateLimitConfig) (*Loaded, error) {
	return FromXDSWith(resources, nil)
}

// FromXDSWith is FromXDS with FastLimit's extensions: those a descriptor's
// metadata carries under "fastlimit", then those of ov, if not nil
// (docs/xds.md). An entry of ov that extends nothing is a warning of the
// Loaded, counted in its OverlayUnmatched; the hash covers ov's.
func FromXDSWith(resources []*rlsconf.RateLimitConfig, ov *Overlay) (*Loaded, error) {
	byName := slices.Clone(resources)
	slices.SortStableFunc(byName, func(a, b *rlsconf.RateLimitConfig) int {
		return strings.Compare(a.GetName(), b.GetName())
	})
	r := &Loaded{FromXDS: true, Resources: make([]string, 0, len(byName))}
	h := sha256.New()
	x := &xdsConverter{}
	domains := make([]descriptors.DomainConfig, 0, len(byName))
	if ov != nil {
		r.Overlay = ov.File
		for _, part := range [][]byte{[]byte("overlay"), []byte(ov.Hash)} {
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
			h.Write(part)
		}
	}
	for i, res := range byName {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("encode resource '%s': %w", res.GetName(), err)
		}
		for _, part := range [][]byte{[]byte(res.GetName()), b} {
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
			h.Write(part)
		}
		r.Resources = append(r.Resources, res.GetName())
		domains = append(domains, x.domain(resourceLabel(res.GetName(), i), res))
	}
	warns, unmatched := ov.apply(domains)
	set, err := descriptors.NewSet(domains)
	errs := append(x.errs, fromSet(err, false)...)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	r.Set, r.Hash = set, hex.EncodeToString(h.Sum(nil))
	r.Warnings, r.OverlayUnmatched = sorted(warns), unmatched
	return r, nil
}

// resourceLabel names a resource in errors, by its position if it has no name.
func resourceLabel(name string, i int) string {
	if name == "" {
		return "resource #" + strconv.Itoa(i)
	}
	return "resource '" + name + "'"
}

// xdsConverter maps RateLimitConfig protos onto descriptors, collecting the
// errors NewSet cannot see (unit numbers this proto does not know).
type xdsConverter struct {
	errs []*Error
}

func (x *xdsConverter) domain(label string, res *rlsconf.RateLimitConfig) descriptors.DomainConfig {
	return descriptors.DomainConfig{
		Name:        res.GetDomain(),
		Source:      fmt.Sprintf("%s (domain '%s')", label, res.GetDomain()),
		Descriptors: x.descriptors(label, res.GetDomain(), "", res.GetDescriptors()),
	}
}

// descriptors converts one level below path ("domain.key_value"), at index
// path at ("descriptors[0]", "" at the top).
func (x *xdsConverter) descriptors(label, path, at string, pbs []*rlsconf.RateLimitDescriptor) []descriptors.Descriptor {
	if len(pbs) == 0 {
		return nil
	}
	out := make([]descriptors.Descriptor, 0, len(pbs))
	for i, pb := range pbs {
		p := path + "." + pb.GetKey()
		if pb.GetValue() != "" {
			p += "_" + pb.GetValue()
		}
		idx := "descriptors[" + strconv.Itoa(i) + "]"
		if at != "" {
			idx = at + "." + idx
		}
		d := descriptors.Descriptor{
			Key:            pb.GetKey(),
			Value:          pb.GetValue(),
			ShadowMode:     pb.GetShadowMode(),
			QuotaMode:      pb.GetQuotaMode(),
			DetailedMetric: pb.GetDetailedMetric(),
			Metadata:       metadata(pb.GetMetadata()),
			Source:         fmt.Sprintf("%s descriptor %s (%s)", label, p, idx),
		}
		if pb.GetRateLimit() != nil {
			d.Limit = x.limit(d.Source, pb.GetRateLimit())
		}
		x.extensions(&d)
		d.Descriptors = x.descriptors(label, p, idx, pb.GetDescriptors())
		out = append(out, d)
	}
	return out
}

// extensions applies the extension fields d's metadata carries under
// metadataKey, and takes them out of the metadata.
func (x *xdsConverter) extensions(d *descriptors.Descriptor) {
	v, ok := d.Metadata[metadataKey]
	if !ok {
		return
	}
	delete(d.Metadata, metadataKey)
	if len(d.Metadata) == 0 {
		d.Metadata = nil
	}
	ext, errs := metadataExt(d.Source, v)
	if len(errs) > 0 {
		x.errs = append(x.errs, errs...)
		return
	}
	if why := ext.extend(d); why != "" {
		x.errs = append(x.errs, &Error{File: d.Source, Msg: "metadata." + metadataKey + ": the descriptor " + why})
	}
}

// limit converts a policy, or returns nil after recording why it cannot.
func (x *xdsConverter) limit(source string, pb *rlsconf.RateLimitPolicy) *descriptors.Limit {
	l := &descriptors.Limit{
		RequestsPerUnit: pb.GetRequestsPerUnit(),
		Unlimited:       pb.GetUnlimited(),
		Name:            pb.GetName(),
	}
	// UNKNOWN is a missing unit, which NewSet reports unless unlimited.
	if u := pb.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
		unit, ok := xdsUnits[u]
		if !ok { // the reference's message, naming the number
			x.errs = append(x.errs, &Error{File: source, Msg: fmt.Sprintf("invalid rate limit unit '%d'", int32(u))})
			return nil
		}
		l.Unit = unit
	}
	for _, r := range pb.GetReplaces() {
		l.Replaces = append(l.Replaces, r.GetName())
	}
	return l
}

// xdsUnits maps every unit of the proto onto FastLimit's, pair by pair
// (WEEK is 7, after MONTH and YEAR).
var xdsUnits = map[rlsconf.RateLimitUnit]descriptors.Unit{
	rlsconf.RateLimitUnit_SECOND: descriptors.Second,
	rlsconf.RateLimitUnit_MINUTE: descriptors.Minute,
	rlsconf.RateLimitUnit_HOUR:   descriptors.Hour,
	rlsconf.RateLimitUnit_DAY:    descriptors.Day,
	rlsconf.RateLimitUnit_WEEK:   descriptors.Week,
	rlsconf.RateLimitUnit_MONTH:  descriptors.Month,
	rlsconf.RateLimitUnit_YEAR:   descriptors.Year,
}

// metadata converts a metadata Struct as the reference does (numbers float64).
func metadata(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	return s.AsMap()
}
