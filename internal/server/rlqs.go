package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/fastlimit/fastlimit/internal/observe/flap"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// RLQSRedisName is the CLIENT SETNAME of the RLQS demand exchanges' connections.
const RLQSRedisName = "fastlimit-rlqs"

// newRLQS builds the Rate Limit Quota Service, with --rlqs. Its
// demand store is the limiter's Redis deployment, so that replicas
// sharing it divide each limit among all their Envoys, over a client of
// its own (--rlqs-redis-pool-size, --rlqs-store-timeout) so that demand
// exchanges never hold RateLimitService's connections; on the embedded
// store (r nil) there is no other replica to share with, and it has none.
func (s *Server) newRLQS(r *store.Redis) error {
	o := s.opts
	if !o.RLQS.Enabled || s.inParent() {
		return nil // with --rlqs-process, the child serves RLQS
	}
	opts, err := o.RLQS.Options(o.OnStoreError)
	if err != nil {
		return o.Named(err)
	}
	opts.Rules = s.limiter.Rules
	opts.Log = s.log
	opts.StoreLog = flap.New(s.log.Named("rlqs"), flap.DefaultEvery, nil)
	opts.KeyPrefix = o.KeyPrefix
	limits := o.Limits // bucket ids are bounded as descriptors are
	opts.IDLimits = &limits
	if o.RLQS.RecvBytes(o.MaxRequestBytes) > o.RLQS.MaxReportBytes {
		opts.MaxReportBytes = o.RLQS.MaxReportBytes // gRPC's limit is --max-request-bytes
	}
	if opts.Observer, err = metrics.NewRLQS(s.registry, s.rlqsTotals); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	opts.Tracer = s.tracing.Tracer()
	if r != nil {
		timeout := o.RLQS.StoreTimeout
		pool := o.RLQS.RedisPoolConns()
		copts := o.Redis.ClientOptions()
		copts.Conn = store.ConnOptions{PoolSize: pool, MaxConns: pool, DialTimeout: copts.Conn.DialTimeout, ReadTimeout: timeout, WriteTimeout: timeout,
			Name: RLQSRedisName}
		client, err := store.NewClient(copts)
		if err != nil {
			return fmt.Errorf("rlqs redis: %w", err)
		}
		s.rlqsRedis = client
		opts.Store = demand.NewRedis(client)
	}
	if s.rlqs, err = rlqs.New(opts); err != nil && s.rlqsRedis != nil {
		_ = s.rlqsRedis.Close()
	}
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
	err := s.rlqs.Close(ctx)
	if s.rlqsRedis != nil {
		err = errors.Join(err, s.rlqsRedis.Close())
	}
	return err
}
