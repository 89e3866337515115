package rls

import (
	"math"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

type entry = *common.RateLimitDescriptor_Entry

// inlineDescriptors is how many descriptors convert without allocating:
// Envoy sends one per rate_limits entry of a route.
const inlineDescriptors = 8

// toRequest converts req, its descriptors in buf when they fit.
func toRequest(req *rlspb.RateLimitRequest, buf []limiter.Descriptor[entry]) limiter.Request[entry] {
	var ds []limiter.Descriptor[entry]
	if n := len(req.GetDescriptors()); n <= cap(buf) {
		ds = buf[:n]
		clear(ds)
	} else {
		ds = make([]limiter.Descriptor[entry], n)
	}
	for i, d := range req.GetDescriptors() {
		ds[i].Entries = d.GetEntries()
		if o := d.GetLimit(); o != nil {
			ds[i].Override = &limiter.Override{
				RequestsPerUnit: o.GetRequestsPerUnit(),
				Unit:            descriptors.Unit(o.GetUnit()),
			}
		}
		if h := d.GetHitsAddend(); h != nil {
			ds[i].Hits, ds[i].HasHits = h.GetValue(), true
		}
		// is_negative_hits (field 4): the hits are given back, not charged.
		ds[i].Refund = d.GetIsNegativeHits()
	}
	return limiter.Request[entry]{Domain: req.GetDomain(), Descriptors: ds, HitsAddend: req.GetHitsAddend()}
}

func toResponse(res *limiter.Response) *rlspb.RateLimitResponse {
	out := &rlspb.RateLimitResponse{
		OverallCode: toCode(res.Code),
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(res.Statuses)),
	}
	blocks := make([]statusBlock, len(res.Statuses))
	for i := range res.Statuses {
		out.Statuses[i] = blocks[i].set(&res.Statuses[i])
	}
	return out
}

// statusBlock holds one status's messages, allocated at once per response.
type statusBlock struct {
	status rlspb.RateLimitResponse_DescriptorStatus
	limit  rlspb.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// set fills b's status from st and returns it.
func (b *statusBlock) set(st *limiter.Status) *rlspb.RateLimitResponse_DescriptorStatus {
	ds := &b.status
	ds.Code = toCode(st.Code)
	lim := st.Limit
	switch {
	case lim == nil:
	case lim.Unlimited:
		ds.LimitRemaining = math.MaxUint32
	default:
		b.limit.Name = lim.Name
		b.limit.RequestsPerUnit = lim.RequestsPerUnit
		b.limit.Unit = rlspb.RateLimitResponse_RateLimit_Unit(lim.Unit)
		ds.CurrentLimit = &b.limit
		ds.LimitRemaining = st.Remaining
		b.reset.Seconds, b.reset.Nanos = resetSeconds(untilReset(st)), 0
		ds.DurationUntilReset = &b.reset
	}
	return ds
}

func toCode(c limiter.Code) rlspb.RateLimitResponse_Code {
	if c == limiter.OverLimit {
		return rlspb.RateLimitResponse_OVER_LIMIT
	}
	return rlspb.RateLimitResponse_OK
}

// resetSeconds is duration_until_reset as the reference gives it: whole
// seconds, rounded up (docs/design.md#ratelimitservice-adapter).
func resetSeconds(ms int64) int64 { return ceilSeconds(ms) }

// untilReset is the ms that duration_until_reset and the reset headers
// give for st: over its limit, until the same request would next be
// allowed (its RetryAfterMillis: a fixed window's end, but a sliding
// window's or a token bucket's may come well before or after its window's
// end or its bucket's refill), so that Envoy's Retry-After, which it
// takes from duration_until_reset, tells the truth; else until its
// window ends or its bucket is full.
func untilReset(st *limiter.Status) int64 {
	if st.Code == limiter.OverLimit && st.RetryAfterMillis > 0 {
		return st.RetryAfterMillis
	}
	return st.ResetMillis
}

// view shows a request to observers as a limiter.View, without copying.
type view rlspb.RateLimitRequest

var _ limiter.View = (*view)(nil)

func (v *view) Len() int            { return len(v.Descriptors) }
func (v *view) Entries(i int) int   { return len(v.Descriptors[i].GetEntries()) }
func (v *view) Override(i int) bool { return v.Descriptors[i].GetLimit() != nil }

func (v *view) Entry(i, j int) (key, value string) {
	e := v.Descriptors[i].GetEntries()[j]
	return e.GetKey(), e.GetValue()
}
