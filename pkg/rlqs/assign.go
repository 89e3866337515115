package rlqs

import (
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// assignOne queues a new subscription's assignment, before the exchange.
func (st *stream) assignOne(r *report, b *envoyBucket) {
	if b.div == nil {
		st.queueKind(b, b.res.kind)
		return
	}
	st.divide(r, b.div, quota.Global)
	st.queueShare(b, b.div.share(b.client))
}

// assignAll queues every named bucket's assignment but unchanged early ones.
func (st *stream) assignAll(r *report) {
	divided := map[*division]bool{}
	for _, b := range r.all {
		fresh := r.early[b]
		switch {
		case b.div == nil:
			if !fresh {
				st.queueKind(b, b.res.kind)
			}
		case r.blanket != limited:
			st.queueKind(b, r.blanket)
		default:
			if !divided[b.div] {
				divided[b.div] = true
				st.divide(r, b.div, r.modes[b.div])
			}
			if strategy, last := strategyOf(b.div.share(b.client)); !fresh || last != b.last {
				st.queueStrategy(b, strategy, last)
			}
		}
	}
}

// names reports whether the report names b.
func (r *report) names(b *envoyBucket) bool {
	if r.named == nil {
		r.named = make(map[*envoyBucket]bool, len(r.all))
		for _, x := range r.all {
			r.named[x] = true
		}
	}
	return r.named[b]
}

// divide divides dv and pushes the urgent changes to the buckets the
// report does not name; the others go with their next answers.
func (st *stream) divide(r *report, dv *division, mode quota.Mode) {
	for _, a := range dv.divide(mode, &st.svc.opts.Division) {
		if a.b == nil || !a.urgent || (a.b.st == st && r.names(a.b)) {
			continue
		}
		if a.b.st.queue(a.b.text, st.svc.shareAction(a.b.id, a)) {
			st.svc.obs.Pushed(st.svc.label(st.domain))
		}
	}
}

// queueKind queues a blanket rule.
func (st *stream) queueKind(b *envoyBucket, k kind) {
	st.queueStrategy(b, blanket(k), sent{kind: k})
}

// queueShare queues a share.
func (st *stream) queueShare(b *envoyBucket, a assigned) {
	strategy, last := strategyOf(a)
	st.queueStrategy(b, strategy, last)
}

// queueStrategy queues strategy; last is its comparable form.
func (st *stream) queueStrategy(b *envoyBucket, strategy *typev3.RateLimitStrategy, last sent) {
	b.last = last
	st.queue(b.text, st.svc.assignment(b.id, strategy))
}

// strategyOf is a share's token bucket (DENY_ALL if not positive), sent.
func strategyOf(a assigned) (*typev3.RateLimitStrategy, sent) {
	tb, ok := quota.Encode(a.share, a.burst)
	if !ok {
		return blanket(denyAll), sent{kind: denyAll}
	}
	return tokenBucket(tb), sent{kind: limited, tb: [3]int64{int64(tb.MaxTokens), int64(tb.TokensPerFill), tb.FillSeconds}}
}

// shareAction is the action of a share, for a push.
func (s *Service) shareAction(id map[string]string, a assigned) *action {
	strategy, _ := strategyOf(a)
	return s.assignment(id, strategy)
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
