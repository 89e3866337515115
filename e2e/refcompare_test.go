package e2e_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/internal/testing/refserver"
)

// sameAnswer returns how FastLimit's answer differs from the reference's,
// or "". Deliberate differences (docs/migrating.md) are taken out first:
// FastLimit keeps a quota descriptor's OVER_LIMIT status, rejecting the
// request when all of them are over (envoyproxy/ratelimit#1059, where the
// pinned version answers OK without duration_until_reset), adds
// Retry-After when OVER_LIMIT, and sends its own fastlimit key in the
// dynamic metadata; the pinned version sends quotaModeEnabled and
// quotaModeViolations, which upstream's main dropped.
func (p *pair) sameAnswer(fl *rls.RateLimitResponse, flErr error, ref *rls.RateLimitResponse, refErr error) string {
	if flErr != nil || refErr != nil {
		if status.Code(flErr) != status.Code(refErr) {
			return fmt.Sprintf("FastLimit %v, reference %v", flErr, refErr)
		}
		return ""
	}
	var diffs []string
	differ := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	quota := quotaOver(fl)
	want := pinnedQuota(fl, quota, p.shadow)
	if want.GetOverallCode() != ref.GetOverallCode() {
		differ("overall code: FastLimit %v (as the pinned version: %v), reference %v", fl.GetOverallCode(), want.GetOverallCode(), ref.GetOverallCode())
	}
	if len(want.GetStatuses()) != len(ref.GetStatuses()) {
		differ("%d statuses, reference %d", len(want.GetStatuses()), len(ref.GetStatuses()))
	}
	for i := range min(len(want.GetStatuses()), len(ref.GetStatuses())) {
		if d := sameStatus(want.GetStatuses()[i], ref.GetStatuses()[i]); d != "" {
			differ("status %d: %s", i, d)
		}
	}
	if d := sameHeaders(fl, ref); d != "" {
		differ("headers: %s", d)
	}
	if d := sameMetadata(fl.GetDynamicMetadata(), ref.GetDynamicMetadata(), quota); d != "" {
		differ("dynamic metadata: %s", d)
	}
	return strings.Join(diffs, "; ")
}

// quotaOver is the indexes of the quota descriptors over their limit, as
// FastLimit's dynamic metadata names them.
func quotaOver(resp *rls.RateLimitResponse) []int {
	var out []int
	over := resp.GetDynamicMetadata().GetFields()["fastlimit"].GetStructValue().GetFields()["overLimit"]
	for _, v := range over.GetListValue().GetValues() {
		f := v.GetStructValue().GetFields()
		if f["quotaMode"].GetBoolValue() {
			out = append(out, int(f["index"].GetNumberValue()))
		}
	}
	return out
}

// pinnedQuota is fl as the pinned reference answers quota descriptors
// over their limit: OK, without duration_until_reset, never failing the
// request.
func pinnedQuota(fl *rls.RateLimitResponse, quota []int, shadow bool) *rls.RateLimitResponse {
	if len(quota) == 0 {
		return fl
	}
	out := proto.Clone(fl).(*rls.RateLimitResponse)
	out.OverallCode = rls.RateLimitResponse_OK
	for i, st := range out.GetStatuses() {
		if slices.Contains(quota, i) {
			st.Code, st.DurationUntilReset = rls.RateLimitResponse_OK, nil
		}
		if st.GetCode() == rls.RateLimitResponse_OVER_LIMIT && !shadow {
			out.OverallCode = rls.RateLimitResponse_OVER_LIMIT
		}
	}
	return out
}

// sameStatus compares two statuses, their durations within a second and
// in whole seconds both.
func sameStatus(a, b *rls.RateLimitResponse_DescriptorStatus) string {
	if a.GetCode() != b.GetCode() || !proto.Equal(a.GetCurrentLimit(), b.GetCurrentLimit()) ||
		a.GetLimitRemaining() != b.GetLimitRemaining() {
		return fmt.Sprintf("FastLimit %v, reference %v", a, b)
	}
	da, db := a.GetDurationUntilReset(), b.GetDurationUntilReset()
	if (da == nil) != (db == nil) || (da.AsDuration()-db.AsDuration()).Abs() > time.Second || da.GetNanos() != db.GetNanos() {
		return fmt.Sprintf("duration_until_reset: FastLimit %v, reference %v", da.AsDuration(), db.AsDuration())
	}
	return ""
}

// sameHeaders compares the rate-limit headers, RateLimit-Reset within a
// second; FastLimit's Retry-After must come with OVER_LIMIT alone.
func sameHeaders(fl, ref *rls.RateLimitResponse) string {
	a, b := headerMap(fl), headerMap(ref)
	if _, ok := a["Retry-After"]; ok != (fl.GetOverallCode() == rls.RateLimitResponse_OVER_LIMIT) {
		return fmt.Sprintf("Retry-After %q on %v", a["Retry-After"], fl.GetOverallCode())
	}
	delete(a, "Retry-After")
	if len(a) != len(b) || a["RateLimit-Limit"] != b["RateLimit-Limit"] || a["RateLimit-Remaining"] != b["RateLimit-Remaining"] {
		return fmt.Sprintf("FastLimit %v, reference %v", a, b)
	}
	ra, erra := strconv.Atoi(a["RateLimit-Reset"])
	rb, errb := strconv.Atoi(b["RateLimit-Reset"])
	if (erra == nil) != (errb == nil) || ra-rb > 1 || rb-ra > 1 {
		return fmt.Sprintf("RateLimit-Reset: FastLimit %v, reference %v", a, b)
	}
	return ""
}

// sameMetadata compares the keys both versions send (domain, descriptors,
// hitsAddend; a limit override's text but for whitespace), and the
// reference's quotaModeViolations with FastLimit's quota descriptors over
// their limit.
func sameMetadata(a, b *structpb.Struct, quota []int) string {
	fa, fb := a.GetFields(), b.GetFields()
	if !proto.Equal(fa["domain"], fb["domain"]) || !proto.Equal(fa["hitsAddend"], fb["hitsAddend"]) {
		return fmt.Sprintf("FastLimit %v, reference %v", a, b)
	}
	da, db := fa["descriptors"].GetListValue().GetValues(), fb["descriptors"].GetListValue().GetValues()
	if len(da) != len(db) {
		return fmt.Sprintf("descriptors: FastLimit %v, reference %v", da, db)
	}
	for i := range da {
		x, y := proto.Clone(da[i].GetStructValue()).(*structpb.Struct), proto.Clone(db[i].GetStructValue()).(*structpb.Struct)
		lx, ly := x.GetFields()["limit"], y.GetFields()["limit"]
		if (lx == nil) != (ly == nil) || !refserver.SameLimitText(lx.GetStringValue(), ly.GetStringValue()) {
			return fmt.Sprintf("descriptor %d limit: FastLimit %v, reference %v", i, lx, ly)
		}
		delete(x.GetFields(), "limit")
		delete(y.GetFields(), "limit")
		if !proto.Equal(x, y) {
			return fmt.Sprintf("descriptor %d: FastLimit %v, reference %v", i, x, y)
		}
	}
	var violations []int
	for _, v := range fb["quotaModeViolations"].GetListValue().GetValues() {
		violations = append(violations, int(v.GetNumberValue()))
	}
	if !slices.Equal(violations, quota) {
		return fmt.Sprintf("reference quotaModeViolations %v, FastLimit's quota descriptors over their limit %v", violations, quota)
	}
	return ""
}
