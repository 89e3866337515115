package rlqs

import (
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// assignAll queues the answer for every bucket the report named: its
// blanket rule, or the share its Envoy is to hold (which refreshes the
// assignment's TTL), but for the blanket rules answered early.
func (st *stream) assignAll(r *report) {
	s := st.svc
	for _, b := range r.all {
		switch {
		case b.div == nil:
			if !r.early[b] {
				st.queueKind(b, b.res.kind)
			}
		case r.blanket != limited:
			h := b.div.zero(b)
			st.queue(b.text, pending{a: s.assignment(b.id, blanket(r.blanket)), b: b, seq: h.seq, ledger: true})
		default:
			s.queueHeld(b.div.current(b), st)
		}
	}
}

// queueKind queues a blanket rule of a bucket that is not limited.
func (st *stream) queueKind(b *envoyBucket, k kind) {
	st.queue(b.text, pending{a: st.svc.assignment(b.id, blanket(k))})
}

// strategyOf is a share's token bucket (DENY_ALL if not positive).
func strategyOf(h held) *typev3.RateLimitStrategy {
	tb, ok := quota.Encode(h.share, h.burst)
	if !ok {
		return blanket(denyAll)
	}
	return tokenBucket(tb)
}

// blanket is k's blanket rule: DENY_ALL for denyAll, else ALLOW_ALL.
func blanket(k kind) *typev3.RateLimitStrategy {
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if k == denyAll {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
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
				AssignmentTimeToLive: &durationpb.Duration{Seconds: s.ttl},
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
