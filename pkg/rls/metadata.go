package rls

import (
	"strconv"
	"strings"
	"unicode/utf8"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// dynamicMetadata is the answer's dynamic_metadata in envoyproxy/ratelimit's
// shape (docs/envoy.md#dynamic-metadata): the domain, every descriptor of
// req, the request's hitsAddend, the rule metadata of the descriptors that
// passed merged into one struct, and FastLimit's "fastlimit" struct naming
// the descriptors over their limit. It never shares or writes the rules'
// metadata.
func dynamicMetadata(req *rlspb.RateLimitRequest, res *limiter.Response) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 5)
	fields["domain"] = structpb.NewStringValue(validUTF8(req.GetDomain()))
	descs := make([]*structpb.Value, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		descs[i] = structpb.NewStructValue(descriptorStruct(d))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if m := passedMetadata(res.Statuses); m != nil {
		fields["metadata"] = m
	}
	if f := overLimit(req.GetDescriptors(), res.Statuses); f != nil {
		fields["fastlimit"] = f
	}
	return &structpb.Struct{Fields: fields}
}

// descriptorStruct is d's entries as "key=value", its limit override as
// text and its hitsAddend when set, zero included.
func descriptorStruct(d *common.RateLimitDescriptor) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 3)
	fields["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entryValues(d.GetEntries())})
	if o := d.GetLimit(); o != nil {
		fields["limit"] = structpb.NewStringValue(overrideText(o))
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

func entryValues(es []entry) []*structpb.Value {
	vs := make([]*structpb.Value, len(es))
	for i, e := range es {
		vs[i] = structpb.NewStringValue(validUTF8(e.GetKey() + "=" + e.GetValue()))
	}
	return vs
}

// overrideText is o in protobuf's text format, as the reference writes it
// but always with one space between fields: zero fields are left out.
func overrideText(o *common.RateLimitDescriptor_RateLimitOverride) string {
	var b []byte
	if n := o.GetRequestsPerUnit(); n != 0 {
		b = strconv.AppendUint(append(b, "requests_per_unit:"...), uint64(n), 10)
	}
	if u := o.GetUnit(); u != 0 {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(append(b, "unit:"...), u.String()...)
	}
	return string(b)
}

// passedMetadata merges, in request order, the rule metadata of the
// descriptors that passed: limited by a rule that is not unlimited and not
// over it (shadow mode's OK counts). The first value of a key is kept;
// where two values are mappings, their keys merge the same way. Nil when
// there is nothing.
func passedMetadata(sts []limiter.Status) *structpb.Value {
	var first, merged map[string]any
	for i := range sts {
		st := &sts[i]
		if st.Limit == nil || st.Limit.Unlimited || st.Code == limiter.OverLimit || len(st.Limit.Metadata) == 0 {
			continue
		}
		switch {
		case first == nil:
			first = st.Limit.Metadata
		case merged == nil:
			merged = ownMaps(first).(map[string]any)
			fallthrough
		default:
			mergeInto(merged, st.Limit.Metadata)
		}
	}
	if merged == nil {
		merged = first
	}
	if merged == nil {
		return nil
	}
	// NewStruct copies every value: the answer shares nothing with the rules.
	s, err := structpb.NewStruct(merged)
	if err != nil {
		return nil // rule metadata comes from YAML or a Struct: it converts
	}
	return structpb.NewStructValue(s)
}

// mergeInto adds to dst the keys of src it lacks, and merges the keys of
// two mappings under one key. dst owns its mappings; src is only read.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		cur, ok := dst[k]
		if !ok {
			dst[k] = ownMaps(v)
			continue
		}
		dm, dok := cur.(map[string]any)
		sm, sok := v.(map[string]any)
		if dok && sok {
			mergeInto(dm, sm)
		}
	}
}

// ownMaps copies v's mappings, at any depth, so that they may be written.
func ownMaps(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	c := make(map[string]any, len(m))
	for k, e := range m {
		c[k] = ownMaps(e)
	}
	return c
}

// overLimit is FastLimit's struct beside the reference's keys: overLimit
// lists each descriptor whose status is OVER_LIMIT with its index, entries,
// rule path, limit name and whether it is a quota descriptor. Nil when none.
func overLimit(descs []*common.RateLimitDescriptor, sts []limiter.Status) *structpb.Value {
	var list []*structpb.Value
	for i := range sts {
		st := &sts[i]
		if st.Code != limiter.OverLimit || st.Limit == nil || i >= len(descs) {
			continue
		}
		f := make(map[string]*structpb.Value, 5)
		f["index"] = structpb.NewNumberValue(float64(i))
		f["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entryValues(descs[i].GetEntries())})
		f["rule"] = structpb.NewStringValue(validUTF8(st.Limit.Path))
		if st.Limit.Name != "" {
			f["name"] = structpb.NewStringValue(validUTF8(st.Limit.Name))
		}
		if st.Quota {
			f["quotaMode"] = structpb.NewBoolValue(true)
		}
		list = append(list, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	if list == nil {
		return nil
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"overLimit": structpb.NewListValue(&structpb.ListValue{Values: list}),
	}})
}

// entryStrings are the entries as "key=value", made UTF-8: Struct strings
// must be, and a request may carry bytes that are not (see Codec).
func entryStrings(es []entry) []any {
	out := make([]any, len(es))
	for i, e := range es {
		out[i] = validUTF8(e.GetKey() + "=" + e.GetValue())
	}
	return out
}

// validUTF8 replaces what is not UTF-8 in s with U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
