package rls

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// requestHeaders are the headers for the upstream, as
// envoyproxy/ratelimit#1168 adds them: the legacy limit, remaining and
// reset headers, under the request names, of the status its response
// headers describe (referenceChoice), whatever the answer; nil when no
// status has a limit.
func (o *HeaderOptions) requestHeaders(sts []limiter.Status) []*core.HeaderValue {
	st := referenceChoice(sts)
	if st == nil {
		return nil
	}
	up := HeaderOptions{Mode: HeadersLegacy,
		LimitHeader: o.RequestLimitHeader, RemainingHeader: o.RequestRemainingHeader, ResetHeader: o.RequestResetHeader}
	return up.headers(st, false)
}
