package limiter

import (
	"math/bits"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// applyParts sets st, the status of a rule with several limits, from the
// results of its joint, one per limit in force (lims): a part each, and
// st as the part that decides (Status.Limit says which).
func applyParts(st *Status, lims []*descriptors.Limit, res []Result) {
	parts := make([]Status, len(res))
	best := 0
	for m := range res {
		p := &parts[m]
		p.Limit, p.Hits, p.Refund, p.Quota = lims[m], st.Hits, st.Refund, st.Quota
		applyResult(p, res[m])
		if m > 0 && decides(&res[m], lims[m], &res[best], lims[best]) {
			best = m
		}
	}
	b := &parts[best]
	st.Code, st.Limit, st.Remaining, st.Shadowed = b.Code, b.Limit, b.Remaining, b.Shadowed
	st.ResetMillis, st.RetryAfterMillis = b.ResetMillis, b.RetryAfterMillis
	st.Parts = parts
}

// decides reports whether limit a's result ra decides a rule's status
// before limit b's rb: a denial before an allowance, the longer wait of
// two denials, the smaller share of its allowance left of two allowances.
func decides(ra *Result, a *descriptors.Limit, rb *Result, b *descriptors.Limit) bool {
	if ra.Allowed != rb.Allowed {
		return !ra.Allowed
	}
	if !ra.Allowed {
		return ra.RetryAfter > rb.RetryAfter
	}
	return lessShare(max(ra.Remaining, 0), a.Allowance(), max(rb.Remaining, 0), b.Allowance())
}

// lessShare reports whether ra/sa < rb/sb, exactly; an allowance of 0 is
// a share of 0.
func lessShare(ra, sa, rb, sb int64) bool {
	switch {
	case sb <= 0:
		return false
	case sa <= 0:
		return true
	}
	ahi, alo := bits.Mul64(uint64(ra), uint64(sb))
	bhi, blo := bits.Mul64(uint64(rb), uint64(sa))
	return ahi < bhi || ahi == bhi && alo < blo
}
