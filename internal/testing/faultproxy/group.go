package faultproxy

import (
	"errors"
	"maps"
	"net"
	"sync"
	"testing"
	"time"
)

// Group is a set of proxies, one per node of a Redis Cluster or a
// sentinel setup. Each rewrites the node addresses the servers hand out
// (CLUSTER SLOTS, MOVED, ASK, SENTINEL replies, +switch-master) into proxy
// addresses, starting a proxy for a new node on the spot. Rules added to
// the Group apply on every proxy, present and future, with Skip and Times
// counted across them. Its methods are safe for concurrent use.
type Group struct {
	o     Options // a template: Upstream is set per proxy
	rules *ruleSet

	mu      sync.Mutex
	closed  bool
	byUp    map[string]*Proxy // upstream address -> proxy
	own     map[string]bool   // the proxies' own addresses
	order   []*Proxy
	lastErr error
}

// NewGroup starts a group with a proxy for each of upstreams (say a
// cluster's seeds, or the sentinels), and closes it when t ends.
func NewGroup(t testing.TB, upstreams ...string) *Group {
	t.Helper()
	g, err := StartGroup(Options{Logf: t.Logf}, upstreams...)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// StartGroup starts a group whose proxies take their options from o (its
// Upstream and Listen are ignored), with a proxy for each of upstreams.
func StartGroup(o Options, upstreams ...string) (*Group, error) {
	o.Upstream, o.Listen = "", ""
	g := &Group{o: o, rules: &ruleSet{}, byUp: map[string]*Proxy{}, own: map[string]bool{}}
	for _, u := range upstreams {
		if _, err := g.proxy(u); err != nil {
			_ = g.Close()
			return nil, err
		}
	}
	return g, nil
}

// Proxy returns the proxy for upstream, starting one if there is none;
// nil once the group is closed or if it cannot listen (Err says why).
func (g *Group) Proxy(upstream string) *Proxy {
	p, _ := g.proxy(upstream)
	return p
}

// Addr returns the address of the proxy for upstream, as Proxy does; ""
// when there is none.
func (g *Group) Addr(upstream string) string {
	if p := g.Proxy(upstream); p != nil {
		return p.Addr()
	}
	return ""
}

// Addrs returns Addr of each of upstreams.
func (g *Group) Addrs(upstreams ...string) []string {
	out := make([]string, len(upstreams))
	for i, u := range upstreams {
		out[i] = g.Addr(u)
	}
	return out
}

// Proxies returns the group's proxies, in the order they started.
func (g *Group) Proxies() []*Proxy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Proxy(nil), g.order...)
}

// Upstreams maps each upstream address to its proxy's address.
func (g *Group) Upstreams() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]string, len(g.byUp))
	for u, p := range g.byUp {
		out[u] = p.Addr()
	}
	return out
}

// Err returns the last error starting a proxy on demand.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastErr
}

func (g *Group) proxy(upstream string) (*Proxy, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("group closed")
	}
	if p := g.byUp[upstream]; p != nil {
		return p, nil
	}
	o := g.o
	o.Upstream = upstream
	p, err := start(o, g.rules)
	if err != nil {
		g.lastErr = err
		return nil, err
	}
	p.setMapper(g.lookup)
	g.byUp[upstream] = p
	g.own[p.Addr()] = true
	g.order = append(g.order, p)
	return p, nil
}

// lookup maps an upstream address to its proxy's, starting one if need
// be; the proxies' own addresses map to nothing.
func (g *Group) lookup(addr string) (string, bool) {
	g.mu.Lock()
	own := g.own[addr]
	g.mu.Unlock()
	if own {
		return "", false
	}
	if host, _, err := net.SplitHostPort(addr); err != nil || !isHost(host) {
		return "", false
	}
	p, err := g.proxy(addr)
	if err != nil {
		return "", false
	}
	return p.Addr(), true
}

// Add applies fault f on every proxy of the group, present and future.
func (g *Group) Add(f Fault) *Rule { return g.rules.add(f) }

// Clear releases every rule added with Add (not those added to a single
// proxy).
func (g *Group) Clear() { g.rules.clear() }

// CutAll is Proxy.CutAll on every proxy.
func (g *Group) CutAll(refuseFor time.Duration) {
	for _, p := range g.Proxies() {
		p.CutAll(refuseFor)
	}
}

// Stats sums the counters of every proxy.
func (g *Group) Stats() Stats {
	sum := Stats{Commands: map[string]int64{}, Faults: map[string]int64{}}
	for _, p := range g.Proxies() {
		s := p.Stats()
		sum.Accepted += s.Accepted
		sum.Refused += s.Refused
		sum.Open += s.Open
		sum.Forwarded += s.Forwarded
		sum.Faked += s.Faked
		sum.Dropped += s.Dropped
		sum.Replies += s.Replies
		sum.Unpaired += s.Unpaired
		sum.Holding += s.Holding
		addCounts(sum.Commands, s.Commands)
		addCounts(sum.Faults, s.Faults)
	}
	return sum
}

func addCounts(dst, src map[string]int64) {
	for k, v := range maps.All(src) {
		dst[k] += v
	}
}

// Close closes every proxy; no new one starts afterwards.
func (g *Group) Close() error {
	g.mu.Lock()
	g.closed = true
	ps := append([]*Proxy(nil), g.order...)
	g.mu.Unlock()
	for _, p := range ps {
		_ = p.Close()
	}
	return nil
}
