package rlqs

import (
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// kind is what a bucket's rule makes of it.
type kind uint8

const (
	limited  kind = iota // a limit divided among Envoys
	allowAll             // unlimited, shadow mode, or unmatched under UnmatchedAllow
	denyAll              // a limit of 0, or unmatched under UnmatchedDeny
)

// resolution is a bucket's rule under one rule set.
type resolution struct {
	kind  kind
	limit *descriptors.Limit // nil when unmatched
	// storeKey is a limited bucket's key in the demand store: the limit's
	// (limiter.AppendKey) with "rlqs" in the window's place.
	storeKey string
	global   quota.Limit // the limit divided, in requests/s and burst
}

// canonical returns a bucket id's entries in key order and its text form,
// "k=v,k2=v2", one-to-one with the id (writeEscaped).
func canonical(id map[string]string) ([]descriptors.Entry, string) {
	entries := make([]descriptors.Entry, 0, len(id))
	for k, v := range id {
		entries = append(entries, descriptors.Entry{Key: k, Value: v})
	}
	slices.SortFunc(entries, func(a, b descriptors.Entry) int { return strings.Compare(a.Key, b.Key) })
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		writeEscaped(&b, e.Key)
		b.WriteByte('=')
		writeEscaped(&b, e.Value)
	}
	return entries, b.String()
}

// writeEscaped writes s with ',', '=' and '\' escaped by '\'.
func writeEscaped(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, ",=\\") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ',' || c == '=' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
}

// resolver resolves buckets, caching the answers of the current set.
type resolver struct {
	prefix    string
	unmatched Unmatched

	mu    sync.Mutex
	set   *descriptors.Set
	cache map[string]*resolution // by domain + "\x00" + canonical id
	bytes int                    // the cache's, about (entryBytes)
}

// maxResolved and maxResolvedBytes bound the cache; it is emptied when
// either is reached.
const (
	maxResolved      = 1 << 17
	maxResolvedBytes = 32 << 20
)

// entryBytes is about what a cache entry holds: its key, its store key,
// and the map's and resolution's overhead.
func entryBytes(key string, res *resolution) int { return len(key) + len(res.storeKey) + 160 }

// resolve resolves a bucket id (canonical entries and text) under set.
func (r *resolver) resolve(set *descriptors.Set, domain string, entries []descriptors.Entry, text string) *resolution {
	ck := domain + "\x00" + text
	r.mu.Lock()
	if r.set != set || len(r.cache) >= maxResolved || r.bytes >= maxResolvedBytes {
		r.set, r.cache, r.bytes = set, map[string]*resolution{}, 0
	}
	res := r.cache[ck]
	r.mu.Unlock()
	if res != nil {
		return res
	}
	res = r.compute(set, domain, entries)
	r.mu.Lock()
	if r.set == set && r.cache[ck] == nil {
		r.cache[ck] = res
		r.bytes += entryBytes(ck, res)
	}
	r.mu.Unlock()
	return res
}

func (r *resolver) compute(set *descriptors.Set, domain string, entries []descriptors.Entry) *resolution {
	d := set.Domain(domain)
	l, ordered := descriptors.MatchBucket(d, entries)
	switch {
	case l == nil:
		if r.unmatched == UnmatchedDeny {
			return &resolution{kind: denyAll}
		}
		return &resolution{kind: allowAll}
	case l.Unlimited || l.ShadowMode:
		return &resolution{kind: allowAll, limit: l}
	case l.RequestsPerUnit == 0:
		return &resolution{kind: denyAll, limit: l}
	}
	// A rule with several limits is divided as the least rate and the least
	// burst of them, which exceeds none (docs/rlqs.md, "Several limits").
	members := l.Joint
	if members == nil {
		members = []*descriptors.Limit{l}
	}
	global := quota.Limit{Rate: math.Inf(1), Burst: math.Inf(1)}
	for _, m := range members {
		if m.RequestsPerUnit == 0 {
			return &resolution{kind: denyAll, limit: l}
		}
		window := float64(m.WindowMillis()) / 1000
		perRequest := float64(m.Cost)
		global.Rate = min(global.Rate, float64(m.Capacity())/perRequest/window)
		global.Burst = min(global.Burst, float64(m.Burst)/perRequest)
	}
	key := limiter.AppendKey(nil, r.prefix, domain, l, ordered, limiter.Tenant(d, ordered))
	return &resolution{
		kind: limited, limit: l,
		storeKey: string(append(key, "rlqs"...)),
		global:   global,
	}
}
