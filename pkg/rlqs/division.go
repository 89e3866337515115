package rlqs

import (
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// division is one limit divided among the Envoy buckets that share it on
// this replica: the quota.Bucket of the (stream, bucket id) clients of one
// limited store key (share_threshold's buckets share one), and its ledger
// of what their Envoys may hold (docs/rlqs.md, "The ledger").
type division struct {
	key    string
	domain string

	mu      sync.Mutex
	q       *quota.Bucket
	buckets map[string]*envoyBucket // by client id
	readAt  time.Time               // last read claimed by a report
	// reads numbers the reads of the store issued for the division, and
	// readApplied is the number of the latest whose answer was recorded:
	// an answer to an earlier one, slower, would undo what a later saw
	// (a client's adoption, say).
	reads, readApplied uint64

	// dirty says the inputs changed since the last division (in mode), so
	// that the targets are computed again; a new division is dirty.
	dirty bool
	mode  quota.Mode
	// left are the rates the Envoys of clients gone may still hold.
	left []leftHeld
	// settling is set while a settle of the division runs; again asks it
	// to run once more.
	settling, again bool

	refs int // guarded by Service.mu
}

// leftHeld is a rate held by the Envoy of a client that left, until.
type leftHeld struct {
	client string
	rate   float64
	until  time.Time
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

// join adds an Envoy bucket's client, under the limit in force; a new
// one joins held out of the division if heldOut, until moved decides
// (in one step: a settle in between would count it beside its old
// value).
func (dv *division) join(b *envoyBucket, l quota.Limit, now time.Time, heldOut bool) {
	dv.mu.Lock()
	if dv.q.Limit != l {
		dv.q.Limit, dv.dirty = l, true
	}
	if dv.q.Client(b.client) == nil {
		c := dv.q.Join(b.client, now)
		c.Hold, b.crediting = heldOut, heldOut
		dv.dirty = true
	}
	dv.buckets[b.client] = b
	dv.mu.Unlock()
}

// leave removes an Envoy bucket's client; its Envoy may hold what it was
// assigned until until (no later than now: it holds nothing).
func (dv *division) leave(b *envoyBucket, now, until time.Time) float64 {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	held := 0.0
	if c := dv.q.Client(b.client); c != nil {
		held = c.Assigned
	}
	if held > 0 && until.After(now) {
		dv.left = append(dv.left, leftHeld{client: b.client, rate: held, until: until})
	}
	dv.q.Leave(b.client)
	delete(dv.buckets, b.client)
	dv.dirty = true
	return held
}

// observe takes a client's report of allowed and denied requests; it
// marks the client due for a raise, which a report makes it.
func (dv *division) observe(b *envoyBucket, allowed, denied uint64, elapsed time.Duration, now time.Time, cfg *quota.Config) {
	dv.mu.Lock()
	if c := dv.q.Client(b.client); c != nil {
		was, known := c.Demand, c.Known
		c.Report(allowed, denied, elapsed, now, cfg)
		dv.dirty = dv.dirty || c.Moved(was, known)
		b.raiseDue = true
	}
	dv.mu.Unlock()
}

// published is what a client publishes: its demand (-1 while unknown)
// and what its Envoy may hold.
func (dv *division) published(client string) quota.Demand {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	c := dv.q.Client(client)
	if c == nil {
		return quota.Demand{Rate: -1}
	}
	d := quota.Demand{Rate: -1, Assigned: c.Assigned}
	if c.Known {
		d.Rate = c.Demand
	}
	return d
}

// wants reports whether a local client wants more than it holds.
func (dv *division) wants() bool {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	wants := false
	dv.q.Clients(func(c *quota.Client) { wants = wants || c.Wants() })
	return wants
}

// shared reports whether other replicas serve the division too.
func (dv *division) shared() bool {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	return dv.q.Replicas() > 1
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

// unread makes the next report's exchange read the other replicas'
// demand again.
func (dv *division) unread() {
	dv.mu.Lock()
	dv.readAt = time.Time{}
	dv.mu.Unlock()
}

// claimWanted reports whether a notice that b's client wants a rate
// others hold is due (at most every gap for each client), and claims it.
func (dv *division) claimWanted(b *envoyBucket, now time.Time, gap time.Duration) bool {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.buckets[b.client] != b || !b.wantedAt.IsZero() && now.Sub(b.wantedAt) < gap {
		return false
	}
	b.wantedAt = now
	return true
}

// readTicket numbers a read of the store about to be issued for the
// division (setRemote).
func (dv *division) readTicket() uint64 {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.reads++
	return dv.reads
}

// setRemote records every client's demand as read at now by the read
// numbered ticket, unless a read issued after it was recorded already.
func (dv *division) setRemote(self string, all []quota.Demand, now time.Time, ticket uint64) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if ticket <= dv.readApplied {
		return
	}
	dv.readApplied = ticket
	if dv.q.SetRemote(self, all, now) {
		dv.dirty = true
	}
}

// sent records that b's Envoy was sent its held share of sequence seq:
// the latest one, a cut, lowers what it holds (and, with a store, leaves
// the store's higher until published); an older one changes nothing, the
// ledger counting the larger of what it and the later ones assign. It
// reports whether the division is to settle again: the cut freed a rate
// for others, or b's target rose while its cut was on its way (a raise
// is not granted meanwhile).
func (dv *division) sent(b *envoyBucket, rate float64, seq uint64, store bool) bool {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	c := dv.q.Client(b.client)
	if c == nil || dv.buckets[b.client] != b || seq != b.seq {
		return false
	}
	wasCutting := b.cutting
	b.cutting = false
	if rate >= c.Assigned {
		return wasCutting && b.target > c.Assigned
	}
	c.Assigned = rate
	b.unpublished = b.unpublished || store
	return true
}

// held is a client's share as its Envoy is to hold it, the burst of
// that, and the sequence number of the action that sends it.
type held struct {
	b            *envoyBucket
	share, burst float64
	seq          uint64
}

// heldLocked is what b's Envoy is to hold, in a new action: its cut while
// one is on its way, else its assigned share; dv.mu is held.
func (dv *division) heldLocked(b *envoyBucket) held {
	rate := 0.0
	if c := dv.q.Client(b.client); c != nil {
		rate = c.Assigned
	}
	if b.cutting {
		rate = b.cutTo
	}
	b.seq++
	return held{b: b, share: rate, burst: dv.burstLocked(b, rate), seq: b.seq}
}

// zero is a blanket rule for b, a limited bucket, in a new action:
// it holds no share of the ledger's.
func (dv *division) zero(b *envoyBucket) held {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	b.seq++
	b.cutting = true
	b.cutTo = 0
	return held{b: b, seq: b.seq}
}

// current is what b's Envoy holds, for its report's answer.
func (dv *division) current(b *envoyBucket) held {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	return dv.heldLocked(b)
}

// burstLocked is the token bucket size of a share of rate for b: the
// limit's burst in proportion to the share, or to its target while it
// is granted less, except that it does not grow while b's Envoy wants
// more than it holds, whose replaced bucket could start full
// (docs/rlqs.md, "Bursts"). A rate sent as DENY_ALL gives the Envoy no
// bucket, so it sizes none: a bucket first answered before its target was
// known is sized by its share when it gets one, not left at 1 while its
// Envoy wants more.
func (dv *division) burstLocked(b *envoyBucket, rate float64) float64 {
	if !quota.Encodes(rate) {
		return 0
	}
	prop := dv.q.Limit.BurstOf(max(rate, b.target))
	if c := dv.q.Client(b.client); b.maxTokens == 0 || prop < b.maxTokens || c != nil && !c.Wants() {
		b.maxTokens = prop
	}
	return b.maxTokens
}

// moved records that b's Envoy came from another stream, having admitted
// allowed there over elapsed (whole seconds). If a client of its bucket
// id (and identity) held a rate there, this replica's that left or
// another replica's as last read, b holds that old value, up to the
// Raise above what it admitted and the limit, counted twice in the ledger
// until adopted (quota.Item.Adopt); else it is credited nothing
// (docs/rlqs.md, "An Envoy that moved").
func (dv *division) moved(b *envoyBucket, allowed uint64, elapsed time.Duration, now time.Time, cfg *quota.Config) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	b.crediting = false
	c := dv.q.Client(b.client)
	if c == nil {
		return
	}
	defer dv.holdLocked(b, c) // out of the division while it adopts, else in
	secs := elapsed.Seconds()
	claim := float64(allowed) / secs
	old, ok := dv.oldValueLocked(b.client, float64(allowed)/(secs+1), claim, now)
	rate := min(old, claim*(1+cfg.Raise), dv.q.Limit.Rate)
	if !ok || rate <= c.Assigned {
		return
	}
	c.Credit(rate)
	b.adoptLeft, b.movedAt = rate, now
	b.adoptLeft -= dv.adoptLocked(b.client, rate, now)
	// The bucket it holds is no bigger than its share's: a bigger one
	// could start full.
	b.maxTokens = dv.q.Limit.BurstOf(rate)
}

// oldValueLocked is the rate held by a client gone from this replica or
// of another replica, of client's bucket (and identity), at least lo and
// nearest claim; false if there is none. dv.mu is held.
func (dv *division) oldValueLocked(client string, lo, claim float64, now time.Time) (float64, bool) {
	best, found := 0.0, false
	consider := func(other string, held float64) {
		if held >= lo && held > 0 && sameBucket(client, other) &&
			(!found || math.Abs(held-claim) < math.Abs(best-claim)) {
			best, found = held, true
		}
	}
	for _, l := range dv.left {
		if l.until.After(now) {
			consider(l.client, l.rate)
		}
	}
	remote, _ := dv.q.Remote()
	for _, d := range remote {
		consider(d.Client, d.Assigned)
	}
	for _, d := range dv.q.RemoteLeft() {
		consider(d.Client, d.Assigned)
	}
	return best, found
}

// sameBucket reports whether two clients (clientID) are of one bucket id
// and, if a is of an identity's group, of that identity.
func sameBucket(a, b string) bool {
	digest := func(c string) string { return c[strings.LastIndexByte(c, '-')+1:] }
	if digest(a) != digest(b) {
		return false
	}
	ga := quota.IdentityOf(a)
	return !strings.HasPrefix(ga, "i") || ga == quota.IdentityOf(b)
}

// releaseHolds lets back into the division the clients that adopted all
// they had to (its view of the others read since).
func (dv *division) releaseHolds() {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	for _, b := range dv.buckets {
		if c := dv.q.Client(b.client); c != nil && c.Hold && b.adoptLeft <= 0 && !b.crediting {
			dv.holdLocked(b, c)
		}
	}
}

// holdLocked holds b's client out of the division while it has some to
// adopt: its old value stands for it meanwhile; dv.mu is held.
func (dv *division) holdLocked(b *envoyBucket, c *quota.Client) {
	if hold := b.adoptLeft > 0; hold != c.Hold {
		c.Hold, dv.dirty = hold, true
	}
}

// adoptLocked takes up to rate from the rates held by client's bucket's
// clients gone and returns what it took; dv.mu is held.
func (dv *division) adoptLocked(client string, rate float64, now time.Time) float64 {
	took := 0.0
	for i := range dv.left {
		l := &dv.left[i]
		if !l.until.After(now) || took >= rate || !sameBucket(client, l.client) {
			continue
		}
		t := min(l.rate, rate-took)
		l.rate -= t
		took += t
	}
	return took
}

// localHeldLocked is what this replica's Envoys may hold, those gone
// included until their time; dv.mu is held.
func (dv *division) localHeldLocked(now time.Time) float64 {
	sum := 0.0
	kept := dv.left[:0]
	for _, l := range dv.left {
		if l.until.After(now) {
			kept = append(kept, l)
			sum += l.rate
		}
	}
	clear(dv.left[len(kept):])
	dv.left = kept
	dv.q.Clients(func(c *quota.Client) { sum += c.Assigned })
	return sum
}

// targetsLocked divides the limit in mode, if its inputs or the mode
// changed, into each local client's settled target.
func (dv *division) targetsLocked(mode quota.Mode, cfg *quota.Config) {
	if !dv.dirty && mode == dv.mode {
		return
	}
	dv.dirty, dv.mode = false, mode
	dv.q.Shares(mode, cfg, func(c *quota.Client, share float64) {
		if b := dv.buckets[c.ID]; b != nil {
			b.target = quota.Settle(c.Assigned, share, cfg)
		}
	})
}

// capLocked is the most every Envoy of the bucket may hold together in
// mode: its capacity and the slack settling allows.
func (dv *division) capLocked(mode quota.Mode, cfg *quota.Config) float64 {
	return dv.q.Capacity(mode) * (1 + cfg.Slack())
}

// raise is a client asking for more, and how much.
type raise struct {
	b    *envoyBucket
	want float64
}

// sortRaises orders raises by what they ask beyond what they hold, least
// first, so that the small ones are met when the free rate is short.
func sortRaises(rs []raise, dv *division) {
	sort.Slice(rs, func(i, j int) bool {
		di := rs[i].want - dv.q.Client(rs[i].b.client).Assigned
		dj := rs[j].want - dv.q.Client(rs[j].b.client).Assigned
		if di != dj {
			return di < dj
		}
		return rs[i].b.client < rs[j].b.client
	})
}
