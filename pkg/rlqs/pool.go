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
	readAt  time.Time        // last read claimed by a report
	// dirty says the division's inputs changed since the last division
	// (in mode), so that a report divides again; else the shares stand.
	// A new pool is dirty: it was never divided.
	dirty bool
	mode  quota.Mode

	refs int // guarded by Service.mu
}

// acquire returns the pool of key, adding a reference.
func (s *Service) acquire(key, domain string, l quota.Limit) *pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pools[key]
	if p == nil {
		p = &pool{key: key, domain: domain, q: quota.NewBucket(l), holders: map[string]*held{}, dirty: true}
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
	if p.q.Limit != l {
		p.q.Limit, p.dirty = l, true
	}
	if p.q.Client(h.client) == nil {
		p.q.Join(h.client, now)
		p.dirty = true
	}
	p.holders[h.client] = h
	p.mu.Unlock()
}

// leave removes a holder's client.
func (p *pool) leave(h *held) {
	p.mu.Lock()
	p.q.Leave(h.client)
	delete(p.holders, h.client)
	p.dirty = true
	p.mu.Unlock()
}

// observe takes a client's report of n requests.
func (p *pool) observe(client string, n uint64, elapsed time.Duration, now time.Time, cfg *quota.Config) {
	p.mu.Lock()
	if c := p.q.Client(client); c != nil {
		was, known := c.Demand, c.Known
		c.Observe(n, elapsed, now, cfg)
		p.dirty = p.dirty || c.Moved(was, known)
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

// claimRead reports whether a report should read the other replicas'
// demand again (the last read is refresh old), and claims the read, so
// that the reports arriving meanwhile do not read it too.
func (p *pool) claimRead(now time.Time, refresh time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.readAt.IsZero() && now.Sub(p.readAt) < refresh {
		return false
	}
	p.readAt = now
	return true
}

// neverRead reports whether the other replicas' demand was never read.
func (p *pool) neverRead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, at := p.q.Remote()
	return at.IsZero()
}

// setRemote records every client's demand as read at now.
func (p *pool) setRemote(self string, all []quota.Demand, now time.Time) {
	p.mu.Lock()
	if p.q.SetRemote(self, all, now) {
		p.dirty = true
	}
	p.mu.Unlock()
}

// assigned is a client's new share and its burst; urgent says whether it
// is worth a push, not only the client's next report.
type assigned struct {
	h            *held
	share, burst float64
	urgent       bool
}

// divide divides the pool in mode, if its inputs changed since the last
// division or the mode did, recording every local client's settled share;
// it returns the shares that changed.
func (p *pool) divide(mode quota.Mode, cfg *quota.Config) []assigned {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dirty && mode == p.mode {
		return nil
	}
	p.dirty, p.mode = false, mode
	var changed []assigned
	p.q.Shares(mode, cfg, func(c *quota.Client, share float64) {
		s := quota.Settle(c.Assigned, share, cfg)
		if s != c.Assigned {
			changed = append(changed, assigned{h: p.holders[c.ID], share: s, burst: p.q.Limit.BurstOf(s), urgent: urgent(c, s)})
			c.Assigned = s
		}
	})
	return changed
}

// urgent reports whether a client's new share must reach it at once,
// rather than with the answer to its next report (at most a period
// later): a cut below the demand it has (it would go on admitting more
// than its due), a raise while it is denied requests, or, for a client
// whose demand is not known yet, a cut to less than half.
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
func (p *pool) share(client string) assigned {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s float64
	if c := p.q.Client(client); c != nil {
		s = c.Assigned
	}
	return assigned{h: p.holders[client], share: s, burst: p.q.Limit.BurstOf(s)}
}
