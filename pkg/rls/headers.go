package rls

import (
	"fmt"
	"math"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Header modes of HeaderOptions.Mode (--response-headers).
const (
	HeadersOff    = "off"
	HeadersIETF   = "ietf"   // RateLimit-Policy and RateLimit
	HeadersLegacy = "legacy" // RateLimit-Limit, -Remaining and -Reset, or the names given
)

// HeaderOptions configure what a response carries besides the decision.
type HeaderOptions struct {
	Mode            string // HeadersOff, HeadersIETF or HeadersLegacy
	LimitHeader     string // legacy names, as the reference server's settings
	RemainingHeader string
	ResetHeader     string
	// DynamicMetadata answers with dynamic_metadata in envoyproxy/ratelimit
	// main's shape, and fastlimit.overLimit (docs/envoy.md#dynamic-metadata).
	DynamicMetadata bool
	ShadowMode      bool // global: overall OK whatever the statuses say
	// RequestHeaders adds the legacy headers, under the Request names, to
	// the request Envoy forwards upstream (request_headers_to_add).
	RequestHeaders                                                 bool
	RequestLimitHeader, RequestRemainingHeader, RequestResetHeader string
}

// Validate checks the header mode.
func (o *HeaderOptions) Validate() error {
	switch o.Mode {
	case HeadersOff, HeadersIETF, HeadersLegacy:
		return nil
	}
	return fmt.Errorf("%q is not off, ietf or legacy", o.Mode)
}

// decorate adds headers and dynamic metadata to out, the answer to req;
// Retry-After only when out's code, after shadow and quota modes, is over.
func (o *HeaderOptions) decorate(out *rlspb.RateLimitResponse, req *rlspb.RateLimitRequest, res *limiter.Response) {
	if o.Mode != HeadersOff {
		pick := mostRestrictive
		if o.Mode == HeadersLegacy {
			pick = referenceChoice
		}
		if st := pick(res.Statuses); st != nil {
			out.ResponseHeadersToAdd = o.headers(st, out.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT)
		}
	}
	if o.DynamicMetadata {
		out.DynamicMetadata = dynamicMetadata(req, res)
	}
	if o.RequestHeaders {
		out.RequestHeadersToAdd = o.requestHeaders(res.Statuses)
	}
}

// mostRestrictive is the limited status with the least remaining, the one
// that resets last breaking ties; over-limit statuses come first.
func mostRestrictive(sts []limiter.Status) *limiter.Status {
	var best *limiter.Status
	for i := range sts {
		st := &sts[i]
		if st.Limit == nil || st.Limit.Unlimited {
			continue
		}
		if best == nil || restrictier(st, best) {
			best = st
		}
	}
	return best
}

// referenceChoice is the status envoyproxy/ratelimit's headers describe:
// the last one over its limit outside quota mode, else the first with the
// least remaining.
func referenceChoice(sts []limiter.Status) *limiter.Status {
	var best *limiter.Status
	least := uint32(math.MaxUint32)
	for i := range sts {
		st := &sts[i]
		switch {
		case st.Limit == nil || st.Limit.Unlimited:
		case st.Code == limiter.OverLimit && !st.Quota:
			best, least = st, 0
		case st.Remaining < least:
			best, least = st, st.Remaining
		}
	}
	return best
}

func restrictier(a, b *limiter.Status) bool {
	if (a.Code == limiter.OverLimit) != (b.Code == limiter.OverLimit) {
		return a.Code == limiter.OverLimit
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return untilReset(a) > untilReset(b)
}

// headers describes st in the mode's headers, with Retry-After if over.
// A rule with several limits (st.Parts) names each: in RateLimit-Policy
// and RateLimit, and in the legacy limit header as draft 03's quota
// policies after st's limit ("10, 10;w=1, 1000;w=86400").
func (o *HeaderOptions) headers(st *limiter.Status, over bool) []*core.HeaderValue {
	var scratch [128]byte
	b := scratch[:0]
	var h headerList
	lim := st.Limit
	reset := ceilSeconds(untilReset(st))
	if o.Mode == HeadersLegacy {
		b = strconv.AppendUint(b, uint64(lim.RequestsPerUnit), 10)
		for i := range st.Parts {
			quota, window := policy(st.Parts[i].Limit)
			b = strconv.AppendInt(append(b, ", "...), quota, 10)
			b = strconv.AppendInt(append(b, ";w="...), window, 10)
		}
		h.end(o.LimitHeader, len(b))
		b = strconv.AppendUint(b, uint64(st.Remaining), 10)
		h.end(o.RemainingHeader, len(b))
		b = strconv.AppendInt(b, reset, 10)
		h.end(o.ResetHeader, len(b))
	} else if st.Parts == nil {
		quota, window := policy(lim)
		b = appendSFString(b, policyName(lim))
		name := len(b)
		b = strconv.AppendInt(append(b, ";q="...), quota, 10)
		b = strconv.AppendInt(append(b, ";w="...), window, 10)
		h.end("RateLimit-Policy", len(b))
		b = append(b, b[:name]...) // the name again
		b = strconv.AppendUint(append(b, ";r="...), uint64(st.Remaining), 10)
		b = strconv.AppendInt(append(b, ";t="...), reset, 10)
		h.end("RateLimit", len(b))
	} else {
		b = appendParts(b, st.Parts, func(b []byte, p *limiter.Status) []byte {
			quota, window := policy(p.Limit)
			b = strconv.AppendInt(append(b, ";q="...), quota, 10)
			return strconv.AppendInt(append(b, ";w="...), window, 10)
		})
		h.end("RateLimit-Policy", len(b))
		b = appendParts(b, st.Parts, func(b []byte, p *limiter.Status) []byte {
			b = strconv.AppendUint(append(b, ";r="...), uint64(p.Remaining), 10)
			return strconv.AppendInt(append(b, ";t="...), ceilSeconds(untilReset(p)), 10)
		})
		h.end("RateLimit", len(b))
	}
	if over {
		b = strconv.AppendInt(b, max(ceilSeconds(st.RetryAfterMillis), 1), 10)
		h.end("Retry-After", len(b))
	}
	return h.list(b)
}

// appendParts appends a structured-field list of one item per part, its
// policy name with the parameters params appends.
func appendParts(b []byte, parts []limiter.Status, params func([]byte, *limiter.Status) []byte) []byte {
	for i := range parts {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = params(appendSFString(b, policyName(parts[i].Limit)), &parts[i])
	}
	return b
}

// headerList builds a few headers whose values share one buffer: the
// list, its messages and the values take one allocation each.
type headerList struct {
	n    int
	keys [4]string
	ends [4]int // where each value ends in the buffer
}

// end names the value that ends at end, after the previous one.
func (h *headerList) end(key string, end int) {
	h.keys[h.n], h.ends[h.n] = key, end
	h.n++
}

// list returns the headers, their values taken from buf.
func (h *headerList) list(buf []byte) []*core.HeaderValue {
	values := string(buf)
	msgs := make([]core.HeaderValue, h.n)
	hs := make([]*core.HeaderValue, h.n)
	start := 0
	for i := range hs {
		msgs[i].Key, msgs[i].Value = h.keys[i], values[start:h.ends[i]]
		hs[i], start = &msgs[i], h.ends[i]
	}
	return hs
}

// policy returns a limit's quota and window in seconds: for a token
// bucket its burst and the time to refill it from empty.
func policy(l *descriptors.Limit) (quota int64, window int64) {
	if l.Algorithm != descriptors.TokenBucket {
		return int64(l.RequestsPerUnit), ceilSeconds(l.WindowMillis())
	}
	num, den := l.RefillRate()
	if num == 0 {
		return l.Burst / descriptors.Milli, 0
	}
	return l.Burst / descriptors.Milli, ceilSeconds((l.Burst*den + num - 1) / num)
}

// policyName is the limit's name, else its Label.
func policyName(l *descriptors.Limit) string {
	if l.Name != "" {
		return l.Name
	}
	return l.Label()
}

// appendSFString appends s as an RFC 8941 string: quoted, '"' and '\'
// escaped, bytes outside printable ASCII dropped.
func appendSFString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c >= 0x20 && c < 0x7f:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

func ceilSeconds(ms int64) int64 { return (ms + 999) / 1000 }
