package rlqs

import (
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// pool is the division of one limited store key on this replica: the
// quota state of every (stream, bucket id) that maps onto the key. Bucket
// ids whose rule shares one counter (share_threshold) share one pool.
type pool struct {
	key    string
	domain string

	mu      sync.Mutex
	q       *quota.Bucket
	holders map[string]*held // by client id
	lastOK  time.Time        // last exchange that read the key

	refs int // guarded by Service.mu
}

// acquire returns the pool of key, adding a reference.
func (s *Service) acquire(key, domain string, l quota.Limit) *pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pools[key]
	if p == nil {
		p = &pool{key: key, domain: domain, q: quota.NewBucket(l), holders: map[string]*held{}}
		s.pools[key] = p
	}
	p.refs++
	return p
}

// release drops a reference to p, forgetting it with the last.
func (s *Service) release(p *pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.refs--; p.refs == 0 {
		delete(s.pools, p.key)
	}
}

// join adds a holder's client to the pool (under the limit of the rules
// in force).
func (p *pool) join(h *held, l quota.Limit, now time.Time) {
	p.mu.Lock()
	p.q.Limit = l
	p.q.Join(h.client, now)
	p.holders[h.client] = h
	p.mu.Unlock()
}

// leave removes a holder's client.
func (p *pool) leave(h *held) {
	p.mu.Lock()
	p.q.Leave(h.client)
	delete(p.holders, h.client)
	p.mu.Unlock()
}

// observe takes a client's report of n requests.
func (p *pool) observe(client string, n uint64, elapsed time.Duration, now time.Time, cfg *quota.Config) {
	p.mu.Lock()
	if c := p.q.Client(client); c != nil {
		c.Observe(n, elapsed, now, cfg)
	}
	p.mu.Unlock()
}

// demand is what a client publishes: its smoothed demand, or -1 while it
// is not known.
func (p *pool) demand(client string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.q.Client(client)
	if c == nil || !c.Known {
		return -1
	}
	return c.Demand
}

// stale reports whether the other replicas' demand should be read again.
func (p *pool) stale(now time.Time, refresh time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, at := p.q.Remote()
	return at.IsZero() || now.Sub(at) >= refresh
}

// neverRead reports whether the other replicas' demand was never read.
func (p *pool) neverRead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastOK.IsZero()
}

// setRemote records every client's demand as read at now.
func (p *pool) setRemote(self string, all []quota.Demand, now time.Time) {
	p.mu.Lock()
	p.q.SetRemote(self, all, now)
	p.lastOK = now
	p.mu.Unlock()
}

// assigned is a client's new share, its burst, and whether it changed.
type assigned struct {
	h            *held
	share, burst float64
	changed      bool
}

// divide computes every local client's settled share in mode and records
// it as assigned; it returns them all, by client.
func (p *pool) divide(mode quota.Mode, cfg *quota.Config) map[string]assigned {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]assigned, len(p.holders))
	p.q.Shares(mode, cfg, func(c *quota.Client, share float64) {
		s := quota.Settle(c.Assigned, share, cfg)
		out[c.ID] = assigned{h: p.holders[c.ID], share: s, burst: p.q.Limit.BurstOf(s), changed: s != c.Assigned}
		c.Assigned = s
	})
	return out
}
