package rlqs

import (
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// division is one limit divided among the Envoy buckets that share it on
// this replica: the quota.Bucket of the (stream, bucket id) clients of one
// limited store key (share_threshold's buckets share one).
type division struct {
	key    string
	domain string

	mu      sync.Mutex
	q       *quota.Bucket
	buckets map[string]*envoyBucket // by client id
	readAt  time.Time               // last read claimed by a report
	// dirty says the inputs changed since the last division (in mode), so
	// that a report divides again; a new division is dirty.
	dirty bool
	mode  quota.Mode

	refs int // guarded by Service.mu
}

// acquire returns the division of key, adding a reference.
func (s *Service) acquire(key, domain string, l quota.Limit) *division {
	s.mu.Lock()
	defer s.mu.Unlock()
	dv := s.divisions[key]
	if dv == nil {
		dv = &division{key: key, domain: domain, q: quota.NewBucket(l), buckets: map[string]*envoyBucket{}, dirty: true}
		s.divisions[key] = dv
	}
	dv.refs++
	return dv
}

// release drops a reference to dv, forgetting it with the last.
func (s *Service) release(dv *division) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dv.refs--; dv.refs == 0 {
		delete(s.divisions, dv.key)
	}
}

// join adds an Envoy bucket's client, under the limit in force.
func (dv *division) join(b *envoyBucket, l quota.Limit, now time.Time) {
	dv.mu.Lock()
	if dv.q.Limit != l {
		dv.q.Limit, dv.dirty = l, true
	}
	if dv.q.Client(b.client) == nil {
		dv.q.Join(b.client, now)
		dv.dirty = true
	}
	dv.buckets[b.client] = b
	dv.mu.Unlock()
}

// leave removes an Envoy bucket's client.
func (dv *division) leave(b *envoyBucket) {
	dv.mu.Lock()
	dv.q.Leave(b.client)
	delete(dv.buckets, b.client)
	dv.dirty = true
	dv.mu.Unlock()
}

// observe takes a client's report of n requests.
func (dv *division) observe(client string, n uint64, elapsed time.Duration, now time.Time, cfg *quota.Config) {
	dv.mu.Lock()
	if c := dv.q.Client(client); c != nil {
		was, known := c.Demand, c.Known
		c.Observe(n, elapsed, now, cfg)
		dv.dirty = dv.dirty || c.Moved(was, known)
	}
	dv.mu.Unlock()
}

// demand is what a client publishes: its demand, -1 while unknown.
func (dv *division) demand(client string) float64 {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	c := dv.q.Client(client)
	if c == nil || !c.Known {
		return -1
	}
	return c.Demand
}

// claimRead reports whether the other replicas' demand is refresh old,
// and claims the read, so that the reports meanwhile do not read it too.
func (dv *division) claimRead(now time.Time, refresh time.Duration) bool {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if !dv.readAt.IsZero() && now.Sub(dv.readAt) < refresh {
		return false
	}
	dv.readAt = now
	return true
}

// neverRead reports whether the other replicas' demand was never read.
func (dv *division) neverRead() bool {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	_, at := dv.q.Remote()
	return at.IsZero()
}

// setRemote records every client's demand as read at now.
func (dv *division) setRemote(self string, all []quota.Demand, now time.Time) {
	dv.mu.Lock()
	if dv.q.SetRemote(self, all, now) {
		dv.dirty = true
	}
	dv.mu.Unlock()
}

// assigned is a client's new share and its burst; urgent: push it.
type assigned struct {
	b            *envoyBucket
	share, burst float64
	urgent       bool
}

// divide divides the limit in mode if its inputs or the mode changed,
// settling every local client's share, and returns those that changed.
func (dv *division) divide(mode quota.Mode, cfg *quota.Config) []assigned {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if !dv.dirty && mode == dv.mode {
		return nil
	}
	dv.dirty, dv.mode = false, mode
	var changed []assigned
	dv.q.Shares(mode, cfg, func(c *quota.Client, share float64) {
		s := quota.Settle(c.Assigned, share, cfg)
		if s != c.Assigned {
			changed = append(changed, assigned{b: dv.buckets[c.ID], share: s, burst: dv.q.Limit.BurstOf(s), urgent: urgent(c, s)})
			c.Assigned = s
		}
	})
	return changed
}

// urgent reports whether a client's new share is pushed at once, not
// sent with its next report's answer (docs/rlqs.md, "Pushes").
func urgent(c *quota.Client, share float64) bool {
	old := c.Assigned
	switch {
	case old == 0:
		return true
	case !c.Known:
		return share < old/2
	case share < old:
		return c.Demand > share
	}
	return c.Demand > old
}

// share returns a client's assigned share and its burst.
func (dv *division) share(client string) assigned {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	var s float64
	if c := dv.q.Client(client); c != nil {
		s = c.Assigned
	}
	return assigned{b: dv.buckets[client], share: s, burst: dv.q.Limit.BurstOf(s)}
}
