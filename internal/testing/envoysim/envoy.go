package envoysim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// DefaultReportPeriod is the report period Envoy hard-codes (initTlsStore).
const DefaultReportPeriod = 5 * time.Second

// Stream is the client side of one StreamRateLimitQuotas call.
type Stream interface {
	Send(*rlqspb.RateLimitQuotaUsageReports) error
	Recv() (*rlqspb.RateLimitQuotaResponse, error)
	CloseSend() error
}

// Dialer opens a stream to the RLQS server, at the first bucket and then at
// each report tick without a stream; an error waits for the next tick. The
// stream must end when ctx is cancelled.
type Dialer func(ctx context.Context) (Stream, error)

// Fallback is expired_assignment_behavior: Strategy applies for Timeout
// (whole seconds) after an assignment expires.
type Fallback struct {
	Strategy *typev3.RateLimitStrategy
	Timeout  time.Duration
}

// Config configures an Envoy; each field's zero value is Envoy's default.
type Config struct {
	Domain       string        // the filter's domain, sent in every report
	ReportPeriod time.Duration // the report timer (default DefaultReportPeriod)
	// NoAssignment is no_assignment_behavior (nil: ALLOW_ALL); only a
	// blanket rule, as Envoy crashes on a token bucket there.
	NoAssignment *typev3.RateLimitStrategy
	Expired      *Fallback // expired_assignment_behavior (nil: none)
	// Replace is how a replaced token bucket starts.
	Replace Replace
	// Matcher is the filter's bucket_matchers, for Serve; its buckets'
	// settings replace NoAssignment and Expired.
	Matcher *Matcher
	// Keepalive is the RLQS cluster's HTTP/2 connection_keepalive.
	Keepalive Keepalive
	// ClaimDenied, if positive, makes a dishonest Envoy: each bucket's
	// report adds this many denied requests a second that never were.
	ClaimDenied float64
	// Latency is how long after the server sends a message the Envoy
	// applies it: the network, and the main thread the message is posted
	// to (onReceiveMessage). Until then the Envoy decides as before: a
	// new bucket by no_assignment_behavior.
	Latency time.Duration
	// CreateGap is how long after a worker meets a new bucket the main
	// thread creates it (createBucket posts createBucketImpl) and the
	// workers see it: every request of the bucket meanwhile is decided by
	// no_assignment_behavior, the first counted in the subscription, the
	// others in the next report.
	CreateGap time.Duration
}

// Replace is how Envoy starts a token bucket that replaces another
// (createTokenBucketFromAction; docs/rlqs.md, "The replaced bucket's
// start").
type Replace uint8

const (
	// ReplacePartial starts it at max_tokens * remaining / old max_tokens,
	// truncated, as envoyproxy/envoy#37624 describes and Envoy 1.40.0
	// does (e2e TestEnvoyRLQSFacts measures it). The default.
	ReplacePartial Replace = iota
	// ReplaceFullOrEmpty reads that count as a bool init_fill, as some
	// AtomicTokenBucketImpl sources declare it: full, or empty when it is
	// 0. Kept for the bound tests, which hold under both readings.
	ReplaceFullOrEmpty
)

// Envoy is one of the filter's global clients, safe for concurrent use.
type Envoy struct {
	cfg   Config
	clock Clock
	dial  Dialer
	epoch time.Time

	mu         sync.Mutex
	buckets    map[BucketKey]*bucket
	ka         keepalive
	started    bool      // the first bucket started the timer
	nextReport time.Time // zero until started
	stream     Stream
	streamGen  int
	cancel     context.CancelFunc
	inbox      chan message
	done       chan struct{} // closed by Close
	v          Violations
	stats      Stats
	counts     map[BucketKey]*Counts // over the Envoy's life
	// awaiting are the buckets that reports sent named and no action
	// named since: the server answers every bucket a report names, in
	// one response or several, a report merged with others or not.
	awaiting map[BucketKey]bool
	closed   bool
	delayed  []delayed               // messages received, applied Latency later
	creating map[BucketKey]*creation // buckets a worker met, not yet created (CreateGap)
}

// delayed is a message the Envoy received and applies at due.
type delayed struct {
	due time.Time
	m   message
}

// creation is a bucket a worker met, created on the main thread at due:
// its first request, and the requests since.
type creation struct {
	id              map[string]string
	settings        *rlqsv3.RateLimitQuotaBucketSettings
	due             time.Time
	first           bool // the first request passed
	allowed, denied uint64
}

// Stats are an Envoy's counts of what it did.
type Stats struct {
	Subscriptions    int // subscription reports sent
	Reports          int // periodic reports sent
	DroppedReports   int // reports dropped without a stream
	StreamsOpened    int
	StreamsClosed    int // streams the server ended
	Responses        int
	Abandoned        int // buckets abandoned by the server
	Expired          int // assignments that expired
	FallbackExpired  int // expired_assignment_behavior timeouts
	ReplacedBuckets  int // token buckets replaced by a new assignment
	KeptBuckets      int // token buckets kept across an assignment
	DecidedByDefault int // requests decided by no_assignment_behavior
	// GapDecisions are requests decided by a default or fallback in a
	// bucket that had had an assignment: gaps a server must not leave.
	GapDecisions int
	// Unbucketed are requests Serve let through for want of a bucket (no
	// matcher matched, or the bucket id could not be built).
	Unbucketed int
	// KeepaliveAborts are streams ended for a ping left unanswered.
	KeepaliveAborts int
}

// Counts are a bucket's requests, as the filter decided them.
type Counts struct{ Allowed, Denied uint64 }

type message struct {
	gen  int
	resp *rlqspb.RateLimitQuotaResponse
	err  error // the stream ended
}

// bucket is a CachedBucket (quota_bucket_cache.h).
type bucket struct {
	id           map[string]string
	noAssignment *typev3.RateLimitStrategy // its settings' no_assignment_behavior
	expired      *Fallback                 // its settings' expired_assignment_behavior
	allowed      uint64
	denied       uint64
	lastReport   time.Time
	action       *rlqspb.RateLimitQuotaResponse_BucketAction // cached_action; nil: default
	tb           *tokenBucket
	expires      time.Time // of action; zero: none pending
	fallback     bool      // action is the expired fallback
	assigned     bool      // the server has assigned it at least once
}

// New returns an Envoy that reaches the server through dial, from its first request.
func New(cfg Config, clock Clock, dial Dialer) (*Envoy, error) {
	if cfg.ReportPeriod <= 0 {
		cfg.ReportPeriod = DefaultReportPeriod
	}
	if err := checkNoAssignment(cfg.NoAssignment); err != nil {
		return nil, err
	}
	for _, s := range cfg.Matcher.allSettings() {
		if err := checkNoAssignment(s.GetNoAssignmentBehavior().GetFallbackRateLimit()); err != nil {
			return nil, fmt.Errorf("bucket settings %v: %w", s.GetBucketIdBuilder(), err)
		}
	}
	return &Envoy{
		cfg: cfg, clock: clock, dial: dial,
		epoch:    clock.Now().Add(-time.Hour),
		buckets:  map[BucketKey]*bucket{},
		inbox:    make(chan message, 1024),
		done:     make(chan struct{}),
		counts:   map[BucketKey]*Counts{},
		creating: map[BucketKey]*creation{},
		awaiting: map[BucketKey]bool{},
	}, nil
}

// checkNoAssignment refuses a no_assignment_behavior Envoy 1.40 cannot
// run: a token bucket there has no token bucket object behind it, and the
// second request of a bucket dereferences it (filter.cc
// shouldAllowRequest; e2e TestEnvoyRLQSTokenBucketDefault).
func checkNoAssignment(s *typev3.RateLimitStrategy) error {
	if s.GetTokenBucket() != nil || s.GetRequestsPerTimeUnit() != nil {
		return errors.New("envoysim: no_assignment_behavior must be a blanket rule: Envoy crashes on the second request of a bucket under a token bucket there")
	}
	return nil
}

// BucketKey is a bucket id's key in the Envoy's cache.
type BucketKey [sha256.Size]byte

// Key is a bucket id's key: a hash of its entries in key order, each key
// and value length-prefixed, so that the order of a map does not matter
// and two different ids (an empty value and no key included) never share
// one. Envoy hashes the BucketId proto (MessageUtil::hash, 64 bits).
func Key(id map[string]string) BucketKey {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, k := range keys {
		for _, s := range []string{k, id[k]} {
			h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
			h.Write([]byte(s))
		}
	}
	var key BucketKey
	h.Sum(key[:0])
	return key
}

func (e *Envoy) secs(t time.Time) float64 { return t.Sub(e.epoch).Seconds() }

// Request decides one request of bucket id, as recordBucketUsage does, and
// reports whether it passes.
func (e *Envoy) Request(id map[string]string) bool {
	return e.request(id, nil)
}

// Serve decides a request with these headers (lower-case names) as the
// filter does: the Config's Matcher finds its bucket and settings; a
// request without one passes, uncounted and unreported.
func (e *Envoy) Serve(headers map[string]string) bool {
	id, settings, ok := e.cfg.Matcher.Match(headers)
	if !ok {
		e.mu.Lock()
		e.stats.Unbucketed++
		e.mu.Unlock()
		return true
	}
	return e.request(id, settings)
}

func (e *Envoy) request(id map[string]string, settings *rlqsv3.RateLimitQuotaBucketSettings) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	key := Key(id)
	c := e.counts[key]
	if c == nil {
		c = &Counts{}
		e.counts[key] = c
	}
	allow := false
	if b, ok := e.buckets[key]; ok {
		allow = e.decide(b, now)
	} else {
		allow = e.meet(key, id, settings, now)
	}
	if allow {
		c.Allowed++
	} else {
		c.Denied++
	}
	return allow
}

// decide is shouldAllowRequest on a cached bucket, counting the usage.
func (e *Envoy) decide(b *bucket, now time.Time) bool {
	s := b.noAssignment
	switch {
	case b.action != nil:
		s = b.action.GetQuotaAssignmentAction().GetRateLimitStrategy()
		if b.fallback {
			e.stats.GapDecisions++
		}
	default:
		e.stats.DecidedByDefault++
		if b.assigned {
			e.stats.GapDecisions++
		}
	}
	allow := true
	switch {
	case s.GetTokenBucket() != nil && b.action != nil:
		allow = b.tb.consume(e.secs(now))
	case s != nil && s.GetStrategy() != nil && s.GetTokenBucket() == nil && s.GetRequestsPerTimeUnit() == nil:
		allow = s.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
	}
	if allow {
		b.allowed++
	} else {
		b.denied++
	}
	return allow
}

// meet decides a request of a bucket the workers do not have yet, by its
// no_assignment_behavior: it creates the bucket (createBucketImpl), or,
// with a CreateGap, asks for it and counts the request towards it.
func (e *Envoy) meet(key BucketKey, id map[string]string, settings *rlqsv3.RateLimitQuotaBucketSettings, now time.Time) bool {
	allow := defaultAllows(e.noAssignment(settings))
	e.stats.DecidedByDefault++
	if e.cfg.CreateGap <= 0 {
		e.create(key, id, settings, allow, now)
		return allow
	}
	switch c := e.creating[key]; {
	case c == nil:
		e.creating[key] = &creation{id: copyID(id), settings: settings, due: now.Add(e.cfg.CreateGap), first: allow}
	case allow:
		c.allowed++
	default:
		c.denied++
	}
	return allow
}

// created creates the buckets whose creation is due.
func (e *Envoy) created(now time.Time) {
	for key, c := range e.creating {
		if now.Before(c.due) {
			continue
		}
		delete(e.creating, key)
		b := e.create(key, c.id, c.settings, c.first, now)
		b.allowed += c.allowed
		b.denied += c.denied
	}
}

// noAssignment is a bucket's no_assignment_behavior.
func (e *Envoy) noAssignment(settings *rlqsv3.RateLimitQuotaBucketSettings) *typev3.RateLimitStrategy {
	if settings != nil {
		return settings.GetNoAssignmentBehavior().GetFallbackRateLimit()
	}
	return e.cfg.NoAssignment
}

// defaultAllows is noAssignmentBehaviorShouldAllow: only a blanket
// DENY_ALL denies.
func defaultAllows(na *typev3.RateLimitStrategy) bool {
	return !(na.GetStrategy() != nil && na.GetTokenBucket() == nil && na.GetRequestsPerTimeUnit() == nil &&
		na.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL)
}

// create is createBucketImpl: the bucket, its first request (allow)
// counted in the subscription report it sends.
func (e *Envoy) create(key BucketKey, id map[string]string, settings *rlqsv3.RateLimitQuotaBucketSettings, allow bool, now time.Time) *bucket {
	b := &bucket{id: copyID(id), lastReport: now, noAssignment: e.noAssignment(settings), expired: e.cfg.Expired}
	if settings != nil {
		b.expired = nil
		if ex := settings.GetExpiredAssignmentBehavior(); ex.GetFallbackRateLimit() != nil {
			b.expired = &Fallback{Strategy: ex.GetFallbackRateLimit(), Timeout: ex.GetExpiredAssignmentBehaviorTimeout().AsDuration()}
		}
	}
	if !e.started {
		e.started = true
		e.nextReport = now.Add(e.cfg.ReportPeriod)
		e.startStream()
	}
	if allow {
		b.allowed = 1
	} else {
		b.denied = 1
	}
	e.buckets[key] = b
	report := &rlqspb.RateLimitQuotaUsageReports{Domain: e.cfg.Domain}
	report.BucketQuotaUsages = append(report.BucketQuotaUsages, e.usage(b, now))
	e.stats.Subscriptions++
	if e.send(report) && len(id) > 0 {
		e.await(report)
	}
	return b
}

// await notes that a report sent names its buckets, which the server is
// to answer.
func (e *Envoy) await(r *rlqspb.RateLimitQuotaUsageReports) {
	for _, u := range r.GetBucketQuotaUsages() {
		if id := u.GetBucketId().GetBucket(); len(id) > 0 {
			e.awaiting[Key(id)] = true
		}
	}
}

func copyID(id map[string]string) map[string]string {
	c := make(map[string]string, len(id))
	for k, v := range id {
		c[k] = v
	}
	return c
}

// usage is getUsageFromBucket: the deltas since the last report, which it
// resets, and the time since then truncated to whole seconds.
func (e *Envoy) usage(b *bucket, now time.Time) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqspb.BucketId{Bucket: copyID(b.id)},
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied + uint64(e.cfg.ClaimDenied*now.Sub(b.lastReport).Seconds()),
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
	}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

// send is sendUsageReportImpl; it reports whether the report left for a
// server that can answer it (not into a black hole: see Silent).
func (e *Envoy) send(r *rlqspb.RateLimitQuotaUsageReports) bool {
	if e.stream == nil {
		e.stats.DroppedReports++
		return false
	}
	// A failed send leaves the stream to its reader, which sees it end.
	if e.stream.Send(r) != nil {
		return false
	}
	s, ok := e.stream.(Silent)
	return !ok || !s.Silent()
}

// Silent is a Stream that knows it leads nowhere (a Switch's, black-holed),
// so that the simulation waits for no answer: Envoy itself waits for none.
type Silent interface {
	Silent() bool
}

// startStream is startStreamImpl. It reports whether a stream is open.
func (e *Envoy) startStream() bool {
	if e.stream != nil {
		return true
	}
	if e.closed {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.dial(ctx)
	if err != nil {
		cancel()
		return false
	}
	e.streamGen++
	e.stream, e.cancel = s, cancel
	e.stats.StreamsOpened++
	e.ka.opened(e.clock.Now(), e.cfg.Keepalive)
	go e.read(s, e.streamGen)
	return true
}

// read hands the main loop every message of one stream, then its end.
func (e *Envoy) read(s Stream, gen int) {
	for {
		resp, err := s.Recv()
		select {
		case e.inbox <- message{gen: gen, resp: resp, err: err}:
		case <-e.done:
			return
		}
		if err != nil {
			return
		}
	}
}
