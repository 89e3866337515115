package refstats

import (
	"runtime"

	"github.com/fastlimit/fastlimit/internal/observe/statsd"
)

// The reference's scopes of generated stats: gostats' runtime stats, its
// Redis pool stats and its local cache's (src/server/server_impl.go
// newServer, src/redis/driver_impl.go newPoolStats,
// src/limiter/local_cache_stats.go).
const (
	scopeRuntime    = "ratelimit.go."
	scopeRedisPool  = "ratelimit.redis_pool."
	scopeLocalCache = "ratelimit.localcache."
)

// addRuntimeStats makes the Go runtime's stats, under the names gostats'
// NewRuntimeStats gives them in the reference's "ratelimit.go" scope, and
// sets them at every export: gauges for the heap and GC state, counters
// for the runtime's running totals (exported as they grow). Under the
// built-in mapping they are ratelimit_go_alloc, ratelimit_go_totalAlloc,
// ... The reference never sets "sys" (its gauge stays 0) nor "lookups";
// here "sys" holds the runtime's value and "lookups" is not made.
func addRuntimeStats(st *statsd.Store) {
	g := func(name string) *statsd.Gauge { return st.Gauge(scopeRuntime + name) }
	c := func(name string) *statsd.Counter { return st.Counter(scopeRuntime + name) }
	alloc, sys := g("alloc"), g("sys")
	heapAlloc, heapSys, heapIdle, heapInuse, heapReleased, heapObjects := g("heapAlloc"), g("heapSys"), g("heapIdle"),
		g("heapInuse"), g("heapReleased"), g("heapObjects")
	nextGC, lastGC, gcCPU, goroutines := g("nextGC"), g("lastGC"), g("gcCPUPercent"), g("numGoroutine")
	totalAlloc, mallocs, frees, pauseTotal, numGC := c("totalAlloc"), c("mallocs"), c("frees"), c("pauseTotalNs"), c("numGC")
	st.AddGenerator(func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		alloc.Set(ms.Alloc)
		sys.Set(ms.Sys)
		heapAlloc.Set(ms.HeapAlloc)
		heapSys.Set(ms.HeapSys)
		heapIdle.Set(ms.HeapIdle)
		heapInuse.Set(ms.HeapInuse)
		heapReleased.Set(ms.HeapReleased)
		heapObjects.Set(ms.HeapObjects)
		nextGC.Set(ms.NextGC)
		lastGC.Set(ms.LastGC)
		gcCPU.Set(uint64(ms.GCCPUFraction * 100))
		goroutines.Set(uint64(runtime.NumGoroutine()))
		totalAlloc.Set(ms.TotalAlloc)
		mallocs.Set(ms.Mallocs)
		frees.Set(ms.Frees)
		pauseTotal.Set(ms.PauseTotalNs)
		numGC.Set(uint64(ms.NumGC))
	})
}

// PoolStats are a Redis connection pool's, as the reference counts them.
type PoolStats struct {
	Active uint64 // connections open now (cx_active)
	Total  uint64 // connections opened since the start (cx_total)
	Closed uint64 // connections the pool closed (cx_local_close)
}

// AddRedisPool exports a Redis pool's stats under the reference's names,
// ratelimit.redis_pool.cx_active (gauge), cx_total and cx_local_close
// (counters): ratelimit_redis_pool_cx_active, ... under the built-in
// mapping. stats is read at every export; a nil *Stats does nothing.
func (r *Stats) AddRedisPool(stats func() PoolStats) {
	if r == nil {
		return
	}
	active := r.store.Gauge(scopeRedisPool + "cx_active")
	total, closed := r.store.Counter(scopeRedisPool+"cx_total"), r.store.Counter(scopeRedisPool+"cx_local_close")
	r.store.AddGenerator(func() {
		s := stats()
		active.Set(s.Active)
		total.Set(max(s.Total, total.Value()))
		closed.Set(max(s.Closed, closed.Value()))
	})
}

// CacheStats are a local over-limit cache's.
type CacheStats struct {
	Entries uint64 // keys held (entryCount)
	Hits    uint64 // ops the cache denied itself (hitCount)
}

// AddLocalCache exports the local over-limit cache's stats under the
// reference's names, the gauges ratelimit.localcache.entryCount and
// hitCount (ratelimit_localcache_entryCount, ...). The reference's cache
// (freecache) also reports lookups, misses, evictions, expirations,
// overwrites and access time, which FastLimit's cache does not keep.
func (r *Stats) AddLocalCache(stats func() CacheStats) {
	if r == nil {
		return
	}
	entries, hits := r.store.Gauge(scopeLocalCache+"entryCount"), r.store.Gauge(scopeLocalCache+"hitCount")
	r.store.AddGenerator(func() {
		s := stats()
		entries.Set(s.Entries)
		hits.Set(s.Hits)
	})
}
