package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// quotaPath is where the admin listener shows how a bucket's limit is
// divided (rlqs.Service.Handler).
const quotaPath = "/v1/quota"

// newQuota builds the Rate Limit Quota Service, unless --rlqs=false. Its
// demand store is the limiter's Redis (r, its client shared), so that
// replicas sharing that Redis divide each limit among all their Envoys;
// on the embedded store (r nil) there is no other replica to share with,
// and it has none.
func (s *Server) newQuota(r *store.Redis) error {
	o := s.opts
	if !o.RLQS.Enabled {
		return nil
	}
	opts, err := o.RLQS.Options(o.OnStoreError)
	if err != nil {
		return o.Named(err)
	}
	opts.Rules = s.limiter.Rules
	opts.Log = s.log
	opts.KeyPrefix = o.KeyPrefix
	if opts.Observer, err = metrics.NewRLQS(s.registry, s.quotaTotals); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	opts.Tracer = s.tracing.Tracer()
	if r != nil {
		opts.Store = demand.NewRedis(r.Client())
	}
	s.quota, err = rlqs.New(opts)
	return err
}

// quotaTotals are the quota service's state, for its gauges.
func (s *Server) quotaTotals() map[string]metrics.QuotaTotals {
	if s.quota == nil {
		return nil
	}
	out := map[string]metrics.QuotaTotals{}
	for d, t := range s.quota.Totals() {
		out[d] = metrics.QuotaTotals(t)
	}
	return out
}

// quotaHandler is the admin handler of quotaPath: 404 with the service
// off.
func (s *Server) quotaHandler() http.Handler {
	if s.quota == nil {
		return http.NotFoundHandler()
	}
	return s.quota.Handler()
}

// closeQuota ends the quota streams, so that their Envoys move to another
// replica at their next report, before gRPC stops: a graceful stop waits
// for streams, which only end when their Envoy goes.
func (s *Server) closeQuota(ctx context.Context) error {
	if s.quota == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return s.quota.Close(ctx)
}
