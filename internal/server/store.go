package server

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/guard/breaker"
	"github.com/fastlimit/fastlimit/internal/guard/overlimit"
	"github.com/fastlimit/fastlimit/internal/observe/flap"
	"github.com/fastlimit/fastlimit/internal/observe/logging"
	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/internal/settings"
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
func newStore(o *settings.Settings, log *zap.Logger) (openStore, error) {
	if o.Redis.Client.URL == "" {
		return store.NewMemory(o.Memory), nil
	}
	r, pool, detachLog, err := newRedis(o, log)
	if err != nil {
		return nil, err
	}
	changes := flap.New(log, flap.DefaultEvery, nil).WithFlush() // OnChange observes changes only
	bo := o.Breaker
	// A store that answers a PING only past --store-timeout would fail the
	// requests again: it is not back yet.
	bo.ProbeTimeout = o.StoreTimeout
	// Logged at most once per flap.DefaultEvery: a store that times out
	// under load can open and close it every cooldown.
	bo.OnChange = func(from, to breaker.State) {
		if to == breaker.Closed {
			changes.Up("store circuit breaker", zap.Stringer("from", from), zap.Stringer("to", to))
		} else {
			changes.Down("store circuit breaker", zap.Stringer("from", from), zap.Stringer("to", to))
		}
	}
	b := breaker.New(r, bo)
	g := &guarded{AllOrNothingStore: b, breaker: b, batches: r.BatchStats, pool: pool, redis: r, detachLog: detachLog, open: func(ctx context.Context) error {
		_ = b.Open(ctx) // ties the breaker's prober to the store's life
		return r.Open(ctx)
	}}
	if o.OverLimitCache.Bytes >= overlimit.EntryBytes {
		// Outside the breaker: keys known to be over their limit stay
		// denied while Redis is away.
		g.cache = overlimit.New(b, o.OverLimitCache)
		g.AllOrNothingStore = g.cache
	}
	return g, nil
}

// storeReaders read the embedded store's gauges, or the circuit
// breaker's state, Redis' batches and the over-limit cache's counters.
func storeReaders(st openStore) metrics.StoreReaders {
	if m, ok := st.(*store.Memory); ok {
		return metrics.StoreReaders{
			MemoryKeys:    func() float64 { return float64(m.Stats().Keys) },
			MemoryRefused: func() float64 { return float64(m.Stats().Refused) },
		}
	}
	g, ok := st.(*guarded)
	if !ok {
		return metrics.StoreReaders{}
	}
	r := metrics.StoreReaders{
		BreakerState:    func() float64 { return float64(g.breaker.State()) },
		RedisBatches:    func() float64 { return float64(g.batches().Sends) },
		RedisBatchedOps: func() float64 { return float64(g.batches().Ops) },
	}
	if c := g.cache; c != nil {
		r.CacheHits = func() float64 { return float64(c.Stats().Hits) }
		r.CacheFull = func() float64 { return float64(c.Stats().Full) }
		r.CacheEntries = func() float64 { return float64(c.Stats().Entries) }
	}
	return r
}

// guarded is a store behind a circuit breaker, and the over-limit cache
// when there is one, opened through to the store.
type guarded struct {
	limiter.AllOrNothingStore
	breaker *breaker.Breaker
	open    func(context.Context) error
	cache   *overlimit.Cache        // nil without --over-limit-cache-bytes
	batches func() store.BatchStats // how Takes were merged into script calls
	pool    func() refstats.PoolStats
	redis   *store.Redis // whose client the quota service shares
	// detachLog takes go-redis' process-wide log off this server's logger
	detachLog func()
}

// redisOf is the Redis of a store, nil for the embedded one.
func redisOf(st openStore) *store.Redis {
	if g, ok := st.(*guarded); ok {
		return g.redis
	}
	return nil
}

// addStoreStats gives the reference's stats the Redis pool's and the
// local cache's, as its Redis store and freecache report them.
func addStoreStats(st *refstats.Stats, s openStore) {
	g, ok := s.(*guarded)
	if !ok {
		return
	}
	st.AddRedisPool(g.pool)
	if c := g.cache; c != nil {
		st.AddLocalCache(func() refstats.CacheStats {
			cs := c.Stats()
			return refstats.CacheStats{Entries: uint64(max(cs.Entries, 0)), Hits: cs.Hits}
		})
	}
}

func (g *guarded) Open(ctx context.Context) error { return g.open(ctx) }

// Close closes the store, then takes go-redis' log off the server's
// logger: a dial still under way for the closed client (go-redis dials on
// goroutines of its own) logs nowhere, not to a finished test's logger.
func (g *guarded) Close() error {
	err := g.AllOrNothingStore.Close()
	g.detachLog()
	return err
}

// newRedis builds the Redis store over a client for the deployment
// --redis-type and --redis-url describe (single, cluster or sentinel),
// and reads its connection pool's stats as the reference counts them:
// connections open now, opened since the start (open now plus those the
// pool closed), and closed by the pool (stale or unusable ones).
func newRedis(o *settings.Settings, log *zap.Logger) (*store.Redis, func() refstats.PoolStats, func(), error) {
	copts := o.Redis.ClientOptions()
	client, err := store.NewClient(copts)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("redis: %w", err)
	}
	poolStats := func() refstats.PoolStats {
		ps := client.PoolStats()
		closed := uint64(ps.StaleConns) + uint64(ps.Unusable)
		return refstats.PoolStats{Active: uint64(ps.TotalConns), Total: uint64(ps.TotalConns) + closed, Closed: closed}
	}
	log = log.Named("redis").With(zap.String("redis", copts.String()))
	detachLog := logging.SetRedisLogger(log)
	return store.NewRedis(client, log, o.Redis.StoreOptions()), poolStats, detachLog, nil
}

// storeName describes the store for logs, without credentials.
// storeKind is "memory" or "redis".
func storeKind(o *settings.Settings) string {
	if o.Redis.Client.URL == "" {
		return "memory"
	}
	return "redis"
}

func storeName(o *settings.Settings) string {
	if o.Redis.Client.URL == "" {
		return "memory"
	}
	return "redis " + o.Redis.ClientOptions().String()
}
