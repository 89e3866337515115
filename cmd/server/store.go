package main

import (
	"context"
	"fmt"
	"runtime"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/breaker"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// openStore is a limiter.Store with a lifecycle start.
type openStore interface {
	limiter.Store
	Open(ctx context.Context) error
}

// newStore builds the store the options ask for: Redis when a URL is
// given, the embedded in-memory store otherwise. It starts nothing.
func newStore(o options, log *zap.Logger) (openStore, error) {
	if o.redisURL == "" {
		if err := o.redis.validate(o.redisURL); err != nil {
			return nil, err
		}
		return store.NewMemory(store.MemoryOptions{SweepInterval: o.sweepEvery}), nil
	}
	r, err := newRedis(o, log)
	if err != nil {
		return nil, err
	}
	var under limiter.Store = r
	if o.batchSlots > 0 {
		under = store.NewCoalescer(r, store.CoalesceOptions{InFlight: o.batchSlots, Timeout: o.storeTimeout})
	}
	b := breaker.New(under, breaker.Options{
		Failures: o.breakerFails,
		Cooldown: o.breakerCool,
		// The probe answers a caller: it gets no longer than any request.
		ProbeTimeout: o.storeTimeout,
		OnChange: func(from, to breaker.State) {
			log.Warn("store circuit breaker", zap.Stringer("from", from), zap.Stringer("to", to))
		},
	})
	return &guarded{Breaker: b, open: r.Open}, nil
}

// guarded is a store behind a circuit breaker, opened through to the store.
type guarded struct {
	*breaker.Breaker
	open func(context.Context) error
}

func (g *guarded) Open(ctx context.Context) error { return g.open(ctx) }

// newRedis builds the Redis store over a client for the deployment
// --redis-type and --redis-url describe (single, cluster or sentinel).
func newRedis(o options, log *zap.Logger) (*store.Redis, error) {
	pool := o.poolSize
	if pool <= 0 {
		pool = 10 * runtime.GOMAXPROCS(0)
	}
	copts := o.redis.clientOptions(o.redisURL, store.ConnOptions{
		PoolSize:     pool,
		DialTimeout:  o.dialTimeout,
		ReadTimeout:  o.readTimeout,
		WriteTimeout: o.writeTimeout,
	})
	client, err := store.NewClient(copts)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	log = log.Named("redis").With(zap.String("redis", copts.String()))
	store.SetClientLogger(log)
	return store.NewRedis(client, log, store.RedisOptions{CloseClient: true}), nil
}

// storeName describes the store for logs, without credentials.
func storeName(o options) string {
	if o.redisURL == "" {
		return "memory"
	}
	return "redis " + o.redis.clientOptions(o.redisURL, store.ConnOptions{}).String()
}
