// Package refstats counts decisions as envoyproxy/ratelimit ("the
// reference") counts them, under its stat names, and exports them as it
// does: Prometheus series through a statsd_exporter mapping on
// USE_PROMETHEUS's listener, or statsd (and DogStatsD) lines.
package refstats

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/statsd"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// maxDecisionHits bounds what one decision adds to a stat, so that a
// hits_addend near 2^64 cannot wrap a counter.
const maxDecisionHits = 1 << 32

// defaultMaxDynamicKeys bounds the stat keys that request values make
// (detailed_metric, value_to_metric, limit overrides, unknown domains).
const defaultMaxDynamicKeys = 10000

// Stats counts decisions as envoyproxy/ratelimit ("the reference")
// counts them, under its stat names, in a statsd.Store: per rule
// total_hits, over_limit, near_limit, within_limit, shadow_mode and
// total_negative_hits, and its service counters. collector exports the store to Prometheus,
// a statsd.Client sends it to statsd. As an observer it is safe for
// concurrent use and does not block.
//
// Stats of rules whose key does not depend on the request are resolved
// once per rule set; keys made from request values are capped at
// maxDynamic, past which a decision counts under its rule's configured
// key (or, for an override or an unknown domain, not at all) and bumps
// overflow.
type Stats struct {
	store     *statsd.Store
	limiter   *limiter.Limiter
	nearRatio float32
	index     atomic.Pointer[limitIndex]

	mu         sync.RWMutex
	dynamic    map[string]*ruleStats // by unsanitized key
	maxDynamic int
	overflow   prometheus.Counter
	bufs       sync.Pool // *[]byte

	redisError, serviceError, loadOK, loadError, globalShadow *statsd.Counter

	methodsMu sync.RWMutex
	methods   map[string]*methodStats // by full gRPC method
	prom      *collector              // nil without USE_PROMETHEUS
	timers    bool                    // statsd is on: keep the response timer's values
	now       func() time.Time        // times the calls (time.Now; tests step a fake clock)
}

// ruleStats are one stat key's counters. A nil *ruleStats counts nothing.
type ruleStats struct {
	hits, over, near, within, shadow *statsd.Counter
	negative                         *statsd.Counter // hits given back (is_negative_hits)
}

// limitIndex holds the stats of a rule set's limits by their configured
// key.
type limitIndex struct {
	set   *descriptors.Set
	stats map[*descriptors.Limit]limitStats
}

// limitStats are a limit's stats under its configured key; static tells
// that its key is that whatever the request.
type limitStats struct {
	rs     *ruleStats
	static bool
}

type methodStats struct {
	total *statsd.Counter
	time  prometheus.Observer // nil without Prometheus or when mapped away
	scale float64
	timer *statsd.Timer // nil without statsd
}

func newStats(l *limiter.Limiter, nearRatio float64, maxDynamic int, reg prometheus.Registerer) (*Stats, error) {
	st := statsd.NewStore()
	r := &Stats{
		store: st, limiter: l, nearRatio: float32(nearRatio),
		dynamic: map[string]*ruleStats{}, maxDynamic: maxDynamic,
		overflow:     metrics.RefStatsOverflow(),
		redisError:   st.Counter(statRedisError),
		serviceError: st.Counter(statServiceError),
		loadOK:       st.Counter(statLoadSuccess),
		loadError:    st.Counter(statLoadError),
		globalShadow: st.Counter(statGlobalShadow),
		methods:      map[string]*methodStats{},
		now:          time.Now,
	}
	r.bufs.New = func() any { b := make([]byte, 0, 128); return &b }
	addRuntimeStats(st)
	if err := reg.Register(r.overflow); err != nil {
		return nil, err
	}
	return r, nil
}

// Counters returns every counter the stats hold, in creation order, for
// the admin listener's /stats.
func (r *Stats) Counters() []*statsd.Counter { return r.store.Counters() }

// rulesFor returns the stats of s's limits, building them on the first
// decision under s.
func (r *Stats) rulesFor(s *descriptors.Set) *limitIndex {
	if idx := r.index.Load(); idx != nil && idx.set == s {
		return idx
	}
	idx := &limitIndex{set: s, stats: map[*descriptors.Limit]limitStats{}}
	if s != nil {
		for _, l := range s.Limits() {
			if l.Unlimited {
				continue
			}
			idx.stats[l] = limitStats{rs: r.statsOf(sanitizeStat(l.Label())), static: staticKey(l)}
		}
	}
	r.index.Store(idx)
	return idx
}

// statsOf returns the counters of the (sanitized) stat key.
func (r *Stats) statsOf(key string) *ruleStats {
	p := statRulePrefix + key
	return &ruleStats{
		hits:   r.store.Counter(p + statTotalHits),
		over:   r.store.Counter(p + statOverLimit),
		near:   r.store.Counter(p + statNearLimit),
		within: r.store.Counter(p + statWithinLimit),
		shadow: r.store.Counter(p + statShadowMode),
		// total_negative_hits, as upstream counts refunds since #1140.
		negative: r.store.Counter(p + statNegativeHits),
	}
}

// Decided counts a decision's statuses under their rules' stat keys.
func (r *Stats) Decided(domain string, req limiter.View, res *limiter.Response, _ time.Duration) {
	set := r.limiter.Rules()
	if set.Domain(domain) == nil {
		// The reference counts each descriptor looked up in the domain.
		if c := r.dynamicCounter(domain); c != nil {
			c.Add(uint64(len(res.Statuses)))
		}
		return
	}
	idx := r.rulesFor(set)
	for i := range res.Statuses {
		st := &res.Statuses[i]
		// A refund (is_negative_hits) is no hit: it counts in
		// total_negative_hits alone (count).
		if st.Limit == nil || st.Limit.Unlimited || st.Hits == 0 {
			continue
		}
		override := req != nil && i < req.Len() && req.Override(i)
		if st.Parts == nil {
			r.countAt(idx, domain, override, req, i, st)
			continue
		}
		for j := range st.Parts { // each limit of a rule with several, under its own key
			r.countAt(idx, domain, override, req, i, &st.Parts[j])
		}
	}
}

// countAt counts st, the status of req's descriptor i, under its limit's key.
func (r *Stats) countAt(idx *limitIndex, domain string, override bool, req limiter.View, i int, st *limiter.Status) {
	ls := idx.stats[st.Limit]
	rs := ls.rs
	if override || !ls.static {
		rs = r.dynamicStats(domain, st.Limit, override, req, i, rs)
	}
	r.count(rs, st)
}

// dynamicStats returns the stats of a key made from the values of req's
// descriptor i, or fallback once maxDynamic keys exist.
func (r *Stats) dynamicStats(domain string, lim *descriptors.Limit, override bool, req limiter.View, i int, fallback *ruleStats) *ruleStats {
	bp := r.bufs.Get().(*[]byte)
	defer r.bufs.Put(bp)
	*bp = appendStatKey((*bp)[:0], domain, lim, override, entriesOf(req, i))
	*bp = append(*bp, lim.Label()[len(lim.Path):]...) // "#daily" of one of several limits
	rs := r.dynamicFor(*bp, func(key string) *ruleStats { return r.statsOf(sanitizeStat(key)) })
	if rs == nil {
		return fallback
	}
	return rs
}

// dynamicCounter returns the domain_not_found counter of domain, nil
// past the cap. Its key is the domain after a NUL, apart from rule keys,
// built in a pooled buffer: a domain already seen costs no allocation.
func (r *Stats) dynamicCounter(domain string) *statsd.Counter {
	bp := r.bufs.Get().(*[]byte)
	defer r.bufs.Put(bp)
	*bp = append(append((*bp)[:0], 0), domain...)
	rs := r.dynamicFor(*bp, func(string) *ruleStats {
		return &ruleStats{hits: r.store.Counter(statRulePrefix + sanitizeStat(domain) + statDomainAbsent)}
	})
	if rs == nil {
		return nil
	}
	return rs.hits
}

// dynamicFor returns the stats of key in dynamic, made by add (given the
// key as a string) on its first use; nil, counted as an overflow, once
// maxDynamic keys exist.
func (r *Stats) dynamicFor(key []byte, add func(key string) *ruleStats) *ruleStats {
	r.mu.RLock()
	rs, ok := r.dynamic[string(key)]
	r.mu.RUnlock()
	if ok {
		return rs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rs, ok = r.dynamic[string(key)]; ok {
		return rs
	}
	if len(r.dynamic) >= r.maxDynamic {
		r.overflow.Inc()
		return nil
	}
	k := string(key)
	rs = add(k)
	r.dynamic[k] = rs
	return rs
}

// count adds one status to rs as the reference's base limiter does.
func (r *Stats) count(rs *ruleStats, st *limiter.Status) {
	if rs == nil {
		return
	}
	if st.Refund { // the hits requested back, as upstream's #1140 counts them
		rs.negative.Add(min(st.Hits, maxDecisionHits))
		return
	}
	t := tallyOf(st, r.nearRatio)
	rs.hits.Add(t.hits)
	if t.over > 0 {
		rs.over.Add(t.over)
	}
	if t.near > 0 {
		rs.near.Add(t.near)
	}
	if t.within > 0 {
		rs.within.Add(t.within)
	}
	if t.shadow > 0 {
		rs.shadow.Add(t.shadow)
	}
}

// tally is what one status adds to its rule's stats.
type tally struct{ hits, over, near, within, shadow uint64 }

// tallyOf counts a status as the reference does, with its hits capped at
// maxDecisionHits:
//
//   - over the limit (shadowed or not): every hit is over_limit, and for
//     shadow mode shadow_mode too. (The reference splits a decision of
//     several hits that crosses the limit between over_limit and
//     near_limit; the store does not tell how many were below, so all
//     count as over. A decision of one hit, Envoy's default, counts
//     exactly as there.)
//   - allowed: every hit is within_limit, and those that took the count
//     past floor(limit * nearRatio) are near_limit too.
func tallyOf(st *limiter.Status, nearRatio float32) tally {
	hits := min(st.Hits, maxDecisionHits)
	t := tally{hits: hits}
	switch {
	case st.Shadowed:
		t.over, t.shadow = hits, hits
	case st.Code == limiter.OverLimit:
		t.over = hits
	default:
		t.within = hits
		t.near = nearHits(st.Limit, st.Remaining, hits, nearRatio)
	}
	return t
}

// nearHits returns how many of an allowed decision's hits took the count
// past the near-limit threshold, floor(limit * ratio) requests in float32
// as the reference computes it; the count after the decision is the
// limit (the burst of a token bucket) less what remains.
func nearHits(lim *descriptors.Limit, remaining uint32, hits uint64, ratio float32) uint64 {
	limit := float64(lim.Allowance() / descriptors.Milli)
	threshold := math.Floor(float64(float32(limit) * ratio))
	after := limit - float64(remaining)
	if after <= threshold {
		return 0
	}
	perHit := float64(lim.Cost) / descriptors.Milli // requests one hit charges
	if before := after - float64(hits)*perHit; before >= threshold || perHit <= 0 {
		return hits
	}
	return min(hits, uint64(math.Ceil((after-threshold)/perHit)))
}

// Failed counts a failed request as the reference's service does: a store
// failure is a redis_error, an invalid request a service_error.
func (r *Stats) Failed(_ string, err error, _ time.Duration) {
	if errors.Is(err, limiter.ErrInvalid) {
		r.serviceError.Add(1)
		return
	}
	r.redisError.Add(1)
}

// GlobalShadowed counts an answer that global shadow mode turned OK.
func (r *Stats) GlobalShadowed() { r.globalShadow.Add(1) }

// Loaded counts a successful load of the rules.
func (r *Stats) Loaded(*rules.Loaded, bool) { r.loadOK.Add(1) }

// LoadFailed counts a failed load of the rules.
func (r *Stats) LoadFailed() { r.loadError.Add(1) }

// interceptor counts every unary call and its time, in whole
// milliseconds, as the reference's server reporter does:
// ratelimit_server.METHOD.total_requests and .response_time.
func (r *Stats) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := r.now()
	ms := r.method(info.FullMethod)
	ms.total.Add(1)
	resp, err := h(ctx, req)
	took := r.now().Sub(start).Milliseconds()
	if ms.time != nil {
		ms.time.Observe(float64(took) * ms.scale)
	}
	if ms.timer != nil {
		ms.timer.Add(uint64(took))
	}
	return resp, err
}

// method returns the stats of a full gRPC method name; there are as many
// as the server has methods.
func (r *Stats) method(full string) *methodStats {
	r.methodsMu.RLock()
	ms := r.methods[full]
	r.methodsMu.RUnlock()
	if ms != nil {
		return ms
	}
	r.methodsMu.Lock()
	defer r.methodsMu.Unlock()
	if ms = r.methods[full]; ms != nil {
		return ms
	}
	name := methodName(full)
	ms = &methodStats{total: r.store.Counter(statServerPrefix + name + statTotalRequests), scale: 1}
	if r.prom != nil {
		ms.time, ms.scale = r.prom.observer(statServerPrefix + name + statResponseTime)
	}
	if r.timers {
		ms.timer = r.store.Timer(statServerPrefix + name + statResponseTime)
	}
	r.methods[full] = ms
	return ms
}

// methodName is the method of "/package.Service/Method", "unknown" for a
// name without one, as the reference names it.
func methodName(full string) string {
	full = strings.TrimPrefix(full, "/")
	if _, m, ok := strings.Cut(full, "/"); ok {
		return m
	}
	return "unknown"
}
