package rlqs

import (
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// assignOne queues the assignment of a bucket just subscribed, divided
// with what the replica knows before the store's round trip.
func (st *stream) assignOne(r *report, h *held) {
	if h.pool == nil {
		st.queueKind(h, h.res.kind)
		return
	}
	st.divide(r, h.pool, quota.Global)
	st.queueShare(h, h.pool.share(h.client))
}

// assignAll queues an assignment for every bucket of the report, except
// a subscription answered early whose assignment has not changed.
func (st *stream) assignAll(r *report) {
	divided := map[*pool]bool{}
	for _, h := range r.all {
		fresh := contains(r.early, h)
		switch {
		case h.pool == nil:
			if !fresh {
				st.queueKind(h, h.res.kind)
			}
		case r.blanket != limited:
			st.queueKind(h, r.blanket)
		default:
			if !divided[h.pool] {
				divided[h.pool] = true
				st.divide(r, h.pool, r.modes[h.pool])
			}
			if a := h.pool.share(h.client); !fresh || shareSent(a) != h.last {
				st.queueShare(h, a)
			}
		}
	}
}

// names reports whether the report names h.
func (r *report) names(h *held) bool {
	if r.named == nil {
		r.named = make(map[*held]bool, len(r.all))
		for _, x := range r.all {
			r.named[x] = true
		}
	}
	return r.named[h]
}

func contains(hs []*held, h *held) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}

// divide divides a pool and pushes the shares that changed urgently to
// the buckets of other streams (or of this one) the report does not name;
// the others go with the answers to their next reports.
func (st *stream) divide(r *report, p *pool, mode quota.Mode) {
	for _, a := range p.divide(mode, &st.svc.opts.Quota) {
		if a.h == nil || !a.urgent || (a.h.st == st && r.names(a.h)) {
			continue
		}
		if a.h.st.queue(a.h.text, st.svc.shareAction(a.h.id, a)) {
			st.svc.metrics.pushed(st.domain)
		}
	}
}

// queueKind queues a blanket rule.
func (st *stream) queueKind(h *held, k kind) {
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if k == denyAll {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	h.last = sent{kind: k}
	st.queue(h.text, st.svc.assignment(h.id, &typev3.RateLimitStrategy{
		Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule},
	}))
}

// queueShare queues a share as a token bucket.
func (st *stream) queueShare(h *held, a assigned) {
	tb, ok := quota.Encode(a.share, a.burst)
	if !ok {
		st.queueKind(h, denyAll)
		return
	}
	h.last = shareSent(a)
	st.queue(h.text, st.svc.assignment(h.id, tokenBucket(tb)))
}

// shareSent is the comparable form of a share's action.
func shareSent(a assigned) sent {
	tb, ok := quota.Encode(a.share, a.burst)
	if !ok {
		return sent{kind: denyAll}
	}
	return sent{kind: limited, tb: [3]int64{int64(tb.MaxTokens), int64(tb.TokensPerFill), tb.FillSeconds}}
}

// shareAction is the action of a share, for a push.
func (s *Service) shareAction(id map[string]string, a assigned) *action {
	tb, ok := quota.Encode(a.share, a.burst)
	if !ok {
		return s.assignment(id, &typev3.RateLimitStrategy{
			Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL},
		})
	}
	return s.assignment(id, tokenBucket(tb))
}

func tokenBucket(tb quota.TokenBucket) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     tb.MaxTokens,
		TokensPerFill: wrapperspb.UInt32(tb.TokensPerFill),
		FillInterval:  &durationpb.Duration{Seconds: tb.FillSeconds, Nanos: tb.FillNanos()},
	}}}
}

// assignment is a quota assignment of strategy s with the service's TTL.
func (s *Service) assignment(id map[string]string, strategy *typev3.RateLimitStrategy) *action {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: id},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: &durationpb.Duration{Seconds: quota.TTL(s.opts.ReportPeriod, s.opts.TTLPeriods)},
				RateLimitStrategy:    strategy,
			},
		},
	}
}

func abandonAction(id map[string]string) *action {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: id},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}
