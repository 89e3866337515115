package server

import (
	"context"
	"fmt"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// newRLQS builds the Rate Limit Quota Service, with --rlqs. Its
// demand store is the limiter's Redis (r, its client shared), so that
// replicas sharing that Redis divide each limit among all their Envoys;
// on the embedded store (r nil) there is no other replica to share with,
// and it has none.
func (s *Server) newRLQS(r *store.Redis) error {
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
	limits := o.Limits() // bucket ids are bounded as descriptors are
	opts.IDLimits = &limits
	if o.RLQS.RecvBytes(o.MaxRequestBytes) > o.RLQS.MaxReportBytes {
		opts.MaxReportBytes = o.RLQS.MaxReportBytes // gRPC's limit is --max-request-bytes
	}
	if opts.Observer, err = metrics.NewRLQS(s.registry, s.rlqsTotals); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	opts.Tracer = s.tracing.Tracer()
	if r != nil {
		opts.Store = demand.NewRedis(r.Client())
	}
	s.rlqs, err = rlqs.New(opts)
	return err
}

// rlqsTotals are RLQS's state, for its gauges.
func (s *Server) rlqsTotals() map[string]metrics.RLQSTotals {
	if s.rlqs == nil {
		return nil
	}
	out := map[string]metrics.RLQSTotals{}
	for d, t := range s.rlqs.Totals() {
		out[d] = metrics.RLQSTotals(t)
	}
	return out
}

// closeRLQS ends the RLQS streams, so that their Envoys move to another
// replica at their next report, before gRPC stops: a graceful stop waits
// for streams, which only end when their Envoy goes.
func (s *Server) closeRLQS(ctx context.Context) error {
	if s.rlqs == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return s.rlqs.Close(ctx)
}
