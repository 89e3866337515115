package demand

import (
	"context"
	"sync"
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

	mu      sync.Mutex
	buckets map[string]*memBucket
	calls   int
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
	case it.Op&quota.Write != 0:
		if b == nil {
			b = &memBucket{fields: map[string]memField{}}
			m.buckets[it.Key] = b
		}
		d := it.Demand
		d.Rate = fromMilli(rateMilli(d.Rate))
		if _, ok := b.fields[field]; !ok {
			b.expires = now.Add(ttl)
		}
		b.fields[field] = memField{expires: now.Add(ttl), d: d}
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
	for f, v := range b.fields {
		if v.expires.Before(now) {
			delete(b.fields, f)
			continue
		}
		live = append(live, v.d)
	}
	return live
}

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
