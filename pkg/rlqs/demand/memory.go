package demand

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// memDemandSweep is how many exchanges pass between two sweeps of the
// expired buckets of a Memory.
const memDemandSweep = 1024

// Memory is a demand store in process with Redis's semantics, for tests
// and for replicas of one process (docs/rlqs.md, "Across replicas"). It
// is safe for concurrent use.
type Memory struct {
	now func() time.Time

	mu       sync.Mutex
	buckets  map[string]*memBucket
	calls    int
	watchers map[chan [2]string]struct{}
	notices  atomic.Int64 // queued for a watcher, or being handled
}

type memBucket struct {
	expires time.Time
	fields  map[string]memField // by "replica/client"
}

type memField struct {
	expires time.Time
	d       quota.Demand
}

// NewMemory returns an empty store on the clock now (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, buckets: map[string]*memBucket{}}
}

// Exchange is Redis.Exchange in process, rates in milli-requests too.
func (m *Memory) Exchange(_ context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	if err := checkDemand(items); err != nil || len(items) == 0 {
		return nil, err
	}
	if now.IsZero() {
		now = m.now()
	}
	now = now.Truncate(time.Millisecond)
	ttl = max(ttl.Truncate(time.Millisecond), time.Millisecond)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls++; m.calls%memDemandSweep == 0 {
		m.sweep(now)
	}
	out := make([][]quota.Demand, len(items))
	for i := range items {
		out[i] = m.apply(&items[i], ttl, now)
	}
	return out, nil
}

func (m *Memory) apply(it *quota.Item, ttl time.Duration, now time.Time) []quota.Demand {
	b := m.buckets[it.Key]
	if b != nil && b.expires.Before(now) {
		delete(m.buckets, it.Key)
		b = nil
	}
	field := it.Demand.Replica + "/" + it.Demand.Client
	switch {
	case it.Op&(quota.Write|quota.Reserve) != 0:
		if b == nil {
			b = &memBucket{fields: map[string]memField{}}
			m.buckets[it.Key] = b
		}
		d := it.Demand
		d.Rate = fromRate(rateMilli(d.Rate))
		d.Assigned = float64(heldMilli(d.Assigned)) / 1000
		own := b.held(field, now)
		if it.Op&quota.Reserve != 0 {
			if d.Assigned > own || it.Adopt > 0 {
				most, adopted := b.reserve(field, it, ttl, now)
				d.Adopted = adopted
				if d.Assigned > own {
					d.Assigned = max(own, min(d.Assigned, most))
				}
			}
		} else {
			d.Assigned = max(d.Assigned, own)
		}
		if _, ok := b.fields[field]; !ok {
			b.expires = now.Add(ttl)
		}
		stored := d
		stored.Adopted = 0
		b.fields[field] = memField{expires: now.Add(ttl), d: stored}
		if it.Op&quota.Reserve != 0 {
			return []quota.Demand{d}
		}
	case it.Op&quota.Delete != 0 && b != nil:
		delete(b.fields, field)
	case it.Op&quota.DeleteExpired != 0 && b != nil:
		if f, ok := b.fields[field]; ok && f.expires.Before(now) {
			delete(b.fields, field)
		}
	}
	if it.Op&quota.Read == 0 {
		return nil
	}
	live := []quota.Demand{}
	if b == nil {
		return live
	}
	b.expires = now.Add(ttl)
	staleBefore := now.Add(ttl - it.Fresh)
	for f, v := range b.fields {
		if v.expires.Before(now) {
			delete(b.fields, f)
			continue
		}
		d := v.d
		if it.Fresh > 0 && v.expires.Before(staleBefore) {
			d.Rate = quota.Left
		}
		live = append(live, d)
	}
	return live
}

// held is what a field's live value holds.
func (b *memBucket) held(field string, now time.Time) float64 {
	if f, ok := b.fields[field]; ok && !f.expires.Before(now) {
		return f.d.Assigned
	}
	return 0
}

// reserve adopts as demand.lua does, and returns the most field may hold
// (the cap less what every other live value holds) and what it adopted.
func (b *memBucket) reserve(field string, it *quota.Item, ttl time.Duration, now time.Time) (float64, float64) {
	others := 0.0
	var adoptable []string
	staleBefore := now.Add(ttl - it.Fresh)
	for f, v := range b.fields {
		if f == field || v.expires.Before(now) {
			continue
		}
		others += v.d.Assigned
		if v.d.Assigned > 0 && (v.d.Rate == quota.Left || !v.expires.After(staleBefore)) {
			adoptable = append(adoptable, f)
		}
	}
	// Those that left first, then by the distance of their rate to the
	// client's, as demand.lua.
	far := func(f string) float64 {
		if r := b.fields[f].d.Rate; r != quota.Left {
			return 1 + math.Abs(r-it.Demand.Rate)
		}
		return 0
	}
	slices.Sort(adoptable)
	slices.SortStableFunc(adoptable, func(x, y string) int { return cmp.Compare(far(x), far(y)) })
	capacity := float64(heldMilli(it.Cap)) / 1000
	adopt, adopted := float64(heldMilli(it.Adopt))/1000, 0.0
	for _, f := range adoptable {
		if adopted >= adopt {
			break
		}
		v := b.fields[f]
		take := min(v.d.Assigned, adopt-adopted)
		v.d.Assigned -= take
		v.d.Rate = quota.Left
		b.fields[f] = v
		others, adopted = others-take, adopted+take
	}
	return capacity - others, adopted
}

// Notify is rlqs.Notifier's: every Watch hears of every key (a watcher
// too slow to keep up misses some, as a Redis subscriber may).
func (m *Memory) Notify(_ context.Context, from string, keys []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.watchers {
		for _, k := range keys {
			select {
			case ch <- [2]string{from, k}:
				m.notices.Add(1)
			default:
			}
		}
	}
	return nil
}

// Watch is rlqs.Notifier's.
func (m *Memory) Watch(ctx context.Context, f func(from, key string)) error {
	ch := make(chan [2]string, 256)
	m.mu.Lock()
	if m.watchers == nil {
		m.watchers = map[chan [2]string]struct{}{}
	}
	m.watchers[ch] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.watchers, ch)
		m.mu.Unlock()
		m.notices.Add(-int64(len(ch)))
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-ch:
			f(n[0], n[1])
			m.notices.Add(-1)
		}
	}
}

// Watchers is the number of Watch calls listening.
func (m *Memory) Watchers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.watchers)
}

// Notices is the number of notices sent and not yet handled by a watcher:
// a test that steps a clock waits for none before the next step.
func (m *Memory) Notices() int64 { return m.notices.Load() }

// sweep drops the buckets whose time is over.
func (m *Memory) sweep(now time.Time) {
	for k, b := range m.buckets {
		if b.expires.Before(now) {
			delete(m.buckets, k)
		}
	}
}

// Len is the number of buckets held, expired ones not yet swept included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buckets)
}
