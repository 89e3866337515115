package quota

import (
	"math"
	"slices"
	"strings"
	"time"
)

// Bucket is one bucket's state on a replica: its limit, its clients and the
// other replicas' demand last read. It is not safe for concurrent use.
type Bucket struct {
	Limit Limit

	clients  map[string]*Client
	remote   []Demand // other replicas' clients (not Left)
	left     []Demand // other replicas' clients that left, holding a rate
	replicas int      // other replicas seen in remote
	remoteAt time.Time
	// remoteHeld is what other replicas' Envoys may hold, Left ones included.
	remoteHeld float64

	wants, shares []float64 // scratch
	order, runs   []int
	members       []member
}

// NewBucket returns a bucket of limit l without clients.
func NewBucket(l Limit) *Bucket {
	return &Bucket{Limit: l, clients: map[string]*Client{}}
}

// Join returns the client's state, adding it (joined now) if new.
func (b *Bucket) Join(id string, now time.Time) *Client {
	c := b.clients[id]
	if c == nil {
		c = &Client{ID: id, Joined: now}
		b.clients[id] = c
	}
	return c
}

// Client returns the client's state, or nil.
func (b *Bucket) Client(id string) *Client { return b.clients[id] }

// Leave forgets a client.
func (b *Bucket) Leave(id string) { delete(b.clients, id) }

// Len is the number of local clients.
func (b *Bucket) Len() int { return len(b.clients) }

// Clients calls f for every local client.
func (b *Bucket) Clients(f func(*Client)) {
	for _, c := range b.clients {
		f(c)
	}
}

// SetRemote records the demand of other replicas than self, read at now, and
// reports whether it changes the division (clients, a demand moved, or
// what the other replicas' Envoys hold).
func (b *Bucket) SetRemote(self string, all []Demand, now time.Time) bool {
	if len(b.remote) == 0 && b.remoteHeld == 0 && onlySelf(self, all) {
		b.replicas, b.remoteAt, b.left = 0, now, b.left[:0] // the common case: no other replica
		return false
	}
	old := make(map[[2]string]float64, len(b.remote))
	for _, d := range b.remote {
		old[[2]string{d.Replica, d.Client}] = d.Rate
	}
	b.remote, b.left = b.remote[:0], b.left[:0]
	seen := map[string]bool{}
	held := 0.0
	for _, d := range all {
		if d.Replica != self {
			held += d.Assigned
		}
	}
	changed := moved(b.remoteHeld, held)
	b.remoteHeld = held
	for _, d := range all {
		if d.Replica != self && d.Rate == Left && d.Assigned > 0 {
			b.left = append(b.left, d)
		}
		if d.Replica == self || d.Rate == Left {
			continue
		}
		b.remote = append(b.remote, d)
		seen[d.Replica] = true
		was, ok := old[[2]string{d.Replica, d.Client}]
		changed = changed || !ok || moved(was, d.Rate)
	}
	b.replicas, b.remoteAt = len(seen), now
	return changed || len(old) != len(b.remote)
}

func onlySelf(self string, all []Demand) bool {
	for _, d := range all {
		if d.Replica != self {
			return false
		}
	}
	return true
}

// changeTolerance is the relative change of a demand worth a new division.
const changeTolerance = 0.01

// moved reports whether a demand moved by over changeTolerance, or its knownness.
func moved(was, is float64) bool {
	if (was < 0) != (is < 0) {
		return true
	}
	return math.Abs(is-was) > changeTolerance*math.Max(math.Abs(was), 1e-9)
}

// Remote returns the other replicas' demand last read, and when (zero: never).
func (b *Bucket) Remote() ([]Demand, time.Time) { return b.remote, b.remoteAt }

// RemoteLeft returns the other replicas' clients that left and still hold
// a rate, as last read.
func (b *Bucket) RemoteLeft() []Demand { return b.left }

// RemoteHeld is what the other replicas' Envoys may hold, as last read.
func (b *Bucket) RemoteHeld() float64 { return b.remoteHeld }

// Count is the number of clients a division in mode counts: the local
// ones, and in Global mode the other replicas' too.
func (b *Bucket) Count(mode Mode) int {
	if mode == Global {
		return len(b.clients) + len(b.remote)
	}
	return len(b.clients)
}

// Capacity is what a division in mode divides: the limit, or in Split
// mode this replica's part of it.
func (b *Bucket) Capacity(mode Mode) float64 {
	if mode == Split {
		return b.Limit.Rate / float64(b.Replicas())
	}
	return b.Limit.Rate
}

// Replicas is the number of replicas serving the bucket as last read, this one included.
func (b *Bucket) Replicas() int { return b.replicas + 1 }

// Mode says whose demand a division takes into account.
type Mode uint8

// Modes.
const (
	Global Mode = iota // all clients, the other replicas' as last read
	Split              // limit / Replicas() among the local clients (store down)
)

// IdentityOf is the identity of a client ID: the part before its first
// '|', or the whole ID. The clients of one identity (one Envoy's
// certificate, or one stream) share one fair share, divided among them
// by the same rule.
func IdentityOf(id string) string {
	if i := strings.IndexByte(id, '|'); i >= 0 {
		return id[:i]
	}
	return id
}

// member is one client of a division in Shares: its identity, demand and,
// if it is local, its state.
type member struct {
	identity string
	demand   float64
	known    bool
	local    *Client
}

// Shares divides the limit among the wants (docs/rlqs.md) and calls f with
// each local client's share, requests per second; clients on Hold are
// left out. The limit is divided among the clients' identities
// (IdentityOf), each identity's share among its clients.
func (b *Bucket) Shares(mode Mode, cfg *Config, f func(c *Client, share float64)) {
	capacity := b.Capacity(mode)
	ms := b.members[:0]
	for _, c := range b.clients {
		if !c.Hold {
			ms = append(ms, member{identity: IdentityOf(c.ID), demand: c.Demand, known: c.Known, local: c})
		}
	}
	if mode == Global {
		for _, d := range b.remote {
			ms = append(ms, member{identity: IdentityOf(d.Client), demand: d.Rate, known: d.Rate >= 0})
		}
	}
	b.members = ms
	if len(ms) == 0 {
		return
	}
	slices.SortFunc(ms, func(x, y member) int { return strings.Compare(x.identity, y.identity) })
	b.runs = b.runs[:0]
	for i := range ms {
		if i == 0 || ms[i].identity != ms[i-1].identity {
			b.runs = append(b.runs, i)
		}
	}
	identities := len(b.runs)
	b.runs = append(b.runs, len(ms))
	b.wants = grow(b.wants, len(ms)+identities)
	b.shares = grow(b.shares, len(ms)+identities)
	wants, gwants := b.wants[:len(ms)], b.wants[len(ms):]
	shares, gshares := b.shares[:len(ms)], b.shares[len(ms):]
	even := capacity / float64(identities)
	for g := range identities {
		from, to := b.runs[g], b.runs[g+1]
		gwants[g] = 0
		for i := from; i < to; i++ {
			wants[i] = want(ms[i].demand, ms[i].known, even/float64(to-from), cfg)
			gwants[g] += wants[i]
		}
	}
	b.order = fair(capacity, gwants, gshares, b.order)
	for g := range identities {
		from, to := b.runs[g], b.runs[g+1]
		b.order = fair(gshares[g], wants[from:to], shares[from:to], b.order)
	}
	for i := range ms {
		if ms[i].local != nil {
			f(ms[i].local, shares[i])
		}
	}
	clear(ms)
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// Settle returns the share to assign: assigned while share stays within
// cfg.Raise above and cfg.Lower below it, so that Envoy keeps its bucket.
func Settle(assigned, share float64, cfg *Config) float64 {
	if assigned <= 0 || share <= 0 {
		return share
	}
	if share > assigned*(1+cfg.Raise) || share < assigned*(1-cfg.Lower) {
		return share
	}
	return assigned
}

// Slack is how far settled shares may add up above their capacity,
// as a fraction: Lower/(1-Lower), a share being kept up to that much
// above its due.
func (c *Config) Slack() float64 { return c.Lower / (1 - c.Lower) }

// BurstOf is a share's token-bucket capacity: the burst in proportion, at least 1.
func (l Limit) BurstOf(share float64) float64 {
	if !(l.Rate > 0) {
		return 0
	}
	return math.Max(l.Burst*share/l.Rate, 1)
}
