package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Header modes of --response-headers.
const (
	headersOff    = "off"
	headersIETF   = "ietf"
	headersLegacy = "legacy"
)

// headerOptions configure what a response carries besides the decision.
type headerOptions struct {
	mode            string // off, ietf or legacy
	limitHeader     string // legacy names, as the reference server's settings
	remainingHeader string
	resetHeader     string
	dynamicMetadata bool
	shadowMode      bool // global: overall OK whatever the statuses say
}

func addHeaderFlags(fs *flag.FlagSet, o *headerOptions) {
	fs.StringVar(&o.mode, "response-headers", headersOff,
		"rate-limit response headers: off, ietf (RateLimit-Policy and RateLimit), legacy (RateLimit-Limit/-Remaining/-Reset)")
	fs.StringVar(&o.limitHeader, "limit-limit-header", "RateLimit-Limit", "legacy mode: name of the limit header")
	fs.StringVar(&o.remainingHeader, "limit-remaining-header", "RateLimit-Remaining", "legacy mode: name of the remaining header")
	fs.StringVar(&o.resetHeader, "limit-reset-header", "RateLimit-Reset", "legacy mode: name of the reset header")
	fs.BoolVar(&o.dynamicMetadata, "response-dynamic-metadata", false,
		"answer with dynamic_metadata built from the metadata of the descriptors that passed")
	fs.BoolVar(&o.shadowMode, "shadow-mode", false, "global shadow mode: the overall code is always OK; statuses still tell")
}

func (o *headerOptions) validate() error {
	switch o.mode {
	case headersOff, headersIETF, headersLegacy:
		return nil
	}
	return fmt.Errorf("--response-headers: %q is not off, ietf or legacy", o.mode)
}

// decorate adds headers and dynamic metadata to out, as the options ask.
func (o *headerOptions) decorate(out *rls.RateLimitResponse, res *limiter.Response, domain string, entries [][]entry) {
	if o.mode != headersOff {
		if st := mostRestrictive(res.Statuses); st != nil {
			out.ResponseHeadersToAdd = o.headers(st, res.Code == limiter.OverLimit)
		}
	}
	if o.dynamicMetadata {
		out.DynamicMetadata = dynamicMetadata(res, domain, entries)
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

func restrictier(a, b *limiter.Status) bool {
	if (a.Code == limiter.OverLimit) != (b.Code == limiter.OverLimit) {
		return a.Code == limiter.OverLimit
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetMillis > b.ResetMillis
}

func (o *headerOptions) headers(st *limiter.Status, over bool) []*core.HeaderValue {
	var hs []*core.HeaderValue
	add := func(k, v string) { hs = append(hs, &core.HeaderValue{Key: k, Value: v}) }
	lim := st.Limit
	reset := strconv.FormatInt(ceilSeconds(st.ResetMillis), 10)
	if o.mode == headersLegacy {
		add(o.limitHeader, strconv.FormatUint(uint64(lim.RequestsPerUnit), 10))
		add(o.remainingHeader, strconv.FormatUint(uint64(st.Remaining), 10))
		add(o.resetHeader, reset)
	} else {
		name := sfString(policyName(lim))
		quota, window := policy(lim)
		add("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, quota, window))
		add("RateLimit", fmt.Sprintf("%s;r=%d;t=%s", name, st.Remaining, reset))
	}
	if over {
		add("Retry-After", strconv.FormatInt(max(ceilSeconds(st.RetryAfterMillis), 1), 10))
	}
	return hs
}

// policy returns the quota and window, in seconds, that describe a limit:
// the window for windows (unit_multiplier included), and for a token
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

func policyName(l *descriptors.Limit) string {
	if l.Name != "" {
		return l.Name
	}
	return l.Path
}

// sfString renders s as a structured-field string (RFC 8941): quoted,
// with '"' and '\' escaped and other bytes outside printable ASCII dropped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func ceilSeconds(ms int64) int64 { return (ms + 999) / 1000 }

// dynamicMetadata describes the request for Envoy's dynamic metadata:
// the domain, and for each descriptor that passed under a rule its entries
// ("key=value") and the rule's metadata. Descriptors of quota_mode rules
// that are over are listed by index in quotaModeViolations.
func dynamicMetadata(res *limiter.Response, domain string, entries [][]entry) *structpb.Struct {
	var passed, violations []any
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if st.Quota && st.Code == limiter.OverLimit {
			violations = append(violations, float64(i))
		}
		if st.Limit == nil || st.Code == limiter.OverLimit {
			continue
		}
		d := map[string]any{"entries": entryStrings(entries[i])}
		if len(st.Limit.Metadata) > 0 {
			d["metadata"] = st.Limit.Metadata
		}
		passed = append(passed, d)
	}
	m := map[string]any{"domain": domain, "descriptors": passed}
	if violations != nil {
		m["quotaModeViolations"] = violations
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		// Metadata holds only YAML scalars, lists and string-keyed maps,
		// which always convert; keep the answer rather than fail it.
		return &structpb.Struct{Fields: map[string]*structpb.Value{"domain": structpb.NewStringValue(domain)}}
	}
	return s
}

func entryStrings(es []entry) []any {
	out := make([]any, len(es))
	for i, e := range es {
		out[i] = e.GetKey() + "=" + e.GetValue()
	}
	return out
}
