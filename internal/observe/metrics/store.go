package metrics

import "github.com/prometheus/client_golang/prometheus"

// The store's series, read at scrape time (RegisterStore).
var (
	breakerStateDef = def{name: "fastlimit_store_breaker_state", kind: gauge, when: "with Redis",
		help: "The store's circuit breaker: 0 closed, 1 open (requests get the --on-store-error answer at once), 2 open with a probe in flight."}
	redisBatchesDef = def{name: "fastlimit_redis_batches_total", kind: counter, when: "with Redis",
		help: "Pipelines of script calls sent to Redis for Takes; concurrent requests share them, so that Redis pays one script call for many decisions.",
		see:  "redis.md#how-decisions-reach-redis"}
	redisBatchedOpsDef = def{name: "fastlimit_redis_batched_ops_total", kind: counter, when: "with Redis",
		help: "Decisions (descriptors) those pipelines carried; divided by fastlimit_redis_batches_total, the decisions per batch."}
	cacheHitsDef = def{name: "fastlimit_local_cache_hits_total", kind: counter, when: "with Redis and `--over-limit-cache-bytes`",
		help: "Descriptors denied by the local over-limit cache without a Redis round trip."}
	cacheFullDef = def{name: "fastlimit_local_cache_full_total", kind: counter, when: "with Redis and `--over-limit-cache-bytes`",
		help: "Over-limit keys not cached because the cache was full (--over-limit-cache-bytes)."}
	cacheEntriesDef = def{name: "fastlimit_local_cache_entries", kind: gauge, when: "with Redis and `--over-limit-cache-bytes`",
		help: "Keys held by the local over-limit cache, expired ones not yet dropped included."}
	memoryKeysDef = def{name: "fastlimit_memory_keys", kind: gauge, when: "embedded store",
		help: "Embedded store: windows and buckets held, expired ones not yet swept included (bounded by --memory-max-keys)."}
	memoryRefusedDef = def{name: "fastlimit_memory_refused_total", kind: counter, when: "embedded store",
		help: "Embedded store: requests refused as store errors because --memory-max-keys windows and buckets were held."}

	storeDefs = []*def{&breakerStateDef, &redisBatchesDef, &redisBatchedOpsDef,
		&cacheHitsDef, &cacheFullDef, &cacheEntriesDef, &memoryKeysDef, &memoryRefusedDef}
)

// StoreReaders read the store's state at scrape time, one series each; a
// nil reader's series is not exported. They must be cheap and safe for
// concurrent use.
type StoreReaders struct {
	// BreakerState, RedisBatches and RedisBatchedOps read Redis' circuit
	// breaker (breaker.State) and the script calls' pipelines and the
	// decisions they carried.
	BreakerState, RedisBatches, RedisBatchedOps func() float64
	// CacheHits, CacheFull and CacheEntries read the over-limit cache.
	CacheHits, CacheFull, CacheEntries func() float64
	// MemoryKeys and MemoryRefused read the embedded store.
	MemoryKeys, MemoryRefused func() float64
}

// RegisterStore registers the series of r's readers on reg.
func RegisterStore(reg prometheus.Registerer, r StoreReaders) error {
	var cs []prometheus.Collector
	for _, s := range []struct {
		d *def
		f func() float64
	}{
		{&breakerStateDef, r.BreakerState}, {&redisBatchesDef, r.RedisBatches}, {&redisBatchedOpsDef, r.RedisBatchedOps},
		{&cacheHitsDef, r.CacheHits}, {&cacheFullDef, r.CacheFull}, {&cacheEntriesDef, r.CacheEntries},
		{&memoryKeysDef, r.MemoryKeys}, {&memoryRefusedDef, r.MemoryRefused},
	} {
		if s.f != nil {
			cs = append(cs, s.d.read(s.f))
		}
	}
	return register(reg, cs...)
}
