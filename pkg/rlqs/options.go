package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/clock"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// DemandStore shares the demand of each (bucket, Envoy stream) among
// replicas; demand.Redis and demand.Memory implement it. Exchange writes
// or deletes each item's client, every value living ttl, and returns for
// each item with quota.Read every live demand of its bucket (after the
// writes), nil for the others; now stamps values (zero: the store's
// clock). After an error nothing can be assumed, and the exchange may be
// sent again. It must be safe for concurrent use and honour ctx.
type DemandStore interface {
	Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error)
}

// DefaultTTLPeriods is an assignment's life in report periods unless
// Options say otherwise: long enough for an Envoy to leave a black-holed
// replica by HTTP/2 keepalive and reconnect first (docs/rlqs.md,
// "A replica lost").
const DefaultTTLPeriods = 6

// Notifier is a DemandStore that carries word between replicas that share
// a bucket: of rates freed (a replica that lowered what its clients hold
// tells the others, so that they grant it at once rather than at their
// next read) and of rates wanted (a replica whose client's share is held
// by others' clients tells them, so that they read its demand and cut
// theirs at once). demand.Redis and demand.Memory implement it. A key
// may carry a mark of the service's; Notify may lose words; Watch calls
// f, from one goroutine, until ctx ends.
type Notifier interface {
	Notify(ctx context.Context, from string, keys []string) error
	Watch(ctx context.Context, f func(from, key string)) error
}

// Defaults of Options' bounds, sized in docs/operations.md ("Bounds").
const (
	DefaultMaxBucketsPerStream = 200_000 // as many as a 16 MiB report names
	DefaultMaxBuckets          = 300_000
	DefaultMaxStreams          = 10_000
)

// DefaultReportWorkers is Options.ReportWorkers' default: one per CPU
// (GOMAXPROCS), at least 2.
func DefaultReportWorkers() int { return max(2, runtime.GOMAXPROCS(0)) }

// Unmatched is what a bucket that matches no rule is assigned.
type Unmatched uint8

const (
	// UnmatchedAllow assigns ALLOW_ALL, as RateLimitService answers OK.
	UnmatchedAllow Unmatched = iota
	// UnmatchedDeny assigns DENY_ALL.
	UnmatchedDeny
)

// ParseUnmatched parses "allow" or "deny".
func ParseUnmatched(s string) (Unmatched, error) {
	switch strings.ToLower(s) {
	case "allow":
		return UnmatchedAllow, nil
	case "deny":
		return UnmatchedDeny, nil
	}
	return 0, fmt.Errorf("unmatched bucket answer %q is not allow or deny", s)
}

// StorePolicy is what shares become while the demand store fails.
type StorePolicy uint8

const (
	// StoreKeep divides with the other replicas' demand as last read for
	// Options.StoreGrace, then as StoreSplit. The default.
	StoreKeep StorePolicy = iota
	// StoreSplit divides limit / replicas last seen among its own Envoys.
	StoreSplit
	// StoreAllow assigns ALLOW_ALL to every limited bucket.
	StoreAllow
	// StoreDeny assigns DENY_ALL to every limited bucket.
	StoreDeny
)

var policyNames = [...]string{"keep", "split", "allow", "deny"}

func (p StorePolicy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", p)
}

// ParseStorePolicy parses keep, split, allow or deny, in any case.
func ParseStorePolicy(s string) (StorePolicy, error) {
	for _, p := range []StorePolicy{StoreKeep, StoreSplit} {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	if p, err := limiter.ParseFailurePolicy(strings.ToLower(s)); err == nil && p != limiter.FailError {
		return PolicyFor(p), nil
	}
	return 0, fmt.Errorf("store failure policy %q is not keep, split, allow or deny", s)
}

// PolicyFor is the policy that follows the RateLimitService's: allow and
// deny as themselves, error (meaningless on a stream) as StoreKeep.
func PolicyFor(p limiter.FailurePolicy) StorePolicy {
	switch p {
	case limiter.FailAllow:
		return StoreAllow
	case limiter.FailDeny:
		return StoreDeny
	}
	return StoreKeep
}

// Options configure a Service. Rules is required; zero values default.
type Options struct {
	// Rules returns the rules in force (nil: none), on every report.
	Rules func() *descriptors.Set
	// Store shares demand among replicas; nil: this replica's alone.
	Store DemandStore
	// Log receives the service's errors; nil discards them.
	Log *zap.Logger
	// StoreLog logs the demand store's changes of state (failing, then
	// answering again); nil writes each change to Log. A flapping store
	// wants one that rate-limits its lines.
	StoreLog StateLog
	// Clock is the service's time, and its timers (default clock.Wall;
	// with it, demand is stamped with the store's clock, one for
	// every replica).
	Clock Clock
	// Replica names this replica in the store: letters, digits, '-', '_',
	// '.', ':' (default: random). Two live replicas must not share one.
	Replica string
	// KeyPrefix starts the store keys (default "ratelimit").
	KeyPrefix string
	// ReportPeriod is the Envoys' report period (default 5s, Envoy's).
	ReportPeriod time.Duration
	// TTLPeriods is an assignment's life in report periods (default
	// DefaultTTLPeriods).
	TTLPeriods float64
	// IdleAfter abandons an Envoy's bucket idle this long (default 10m;
	// negative: never).
	IdleAfter time.Duration
	// Unmatched is the answer for buckets no rule matches.
	Unmatched Unmatched
	// OnStoreError is the policy while the store fails.
	OnStoreError StorePolicy
	// StoreGrace bounds StoreKeep (default: one assignment TTL).
	StoreGrace time.Duration
	// StoreTimeout bounds one exchange with the store, of at most 8192
	// items; a larger one is sent as several (default 1s).
	StoreTimeout time.Duration
	// Refresh is when other replicas' demand is read again (default
	// three quarters of ReportPeriod: an Envoy's report comes a period
	// after the one before, give or take its timer's and the network's
	// jitter, and each must find the read due).
	Refresh time.Duration
	// MaxReportBytes, if positive, refuses larger usage reports, ending
	// their stream with ResourceExhausted (the gRPC server's receive
	// limit refuses those above it before they reach the service).
	MaxReportBytes int
	// MaxBucketsPerStream and MaxBuckets bound the buckets one stream and
	// all streams hold (0: DefaultMaxBucketsPerStream, DefaultMaxBuckets;
	// negative: no bound); MaxStreams bounds the streams open (0:
	// DefaultMaxStreams), another ending with ResourceExhausted. A
	// report's new buckets past a bound are refused: answered nothing, so
	// that Envoy's no_assignment_behavior applies; its known ones are
	// answered.
	MaxBucketsPerStream, MaxBuckets, MaxStreams int
	// ReportWorkers bounds the reports the replica works on at once (0:
	// DefaultReportWorkers; negative: no bound), so that quota work cannot
	// take every CPU from what else the process serves (RateLimitService):
	// a stream's report waits for a worker, and the reports the stream
	// sends meanwhile are merged into it, their counts added (counted by
	// Observer.ReportsShed). A report waiting on the DemandStore gives its
	// worker up until the store answers: the bound is on CPU, not on
	// round trips.
	ReportWorkers int
	// IDLimits bound bucket ids as they bound RateLimitService
	// descriptors: MaxEntries entries, keys and values of MaxKeyBytes
	// (nil: limiter.DefaultLimits; MaxDescriptors does not apply). A new
	// bucket whose id passes them is refused.
	IDLimits *limiter.Limits
	// Division tunes the division; its Period is ReportPeriod.
	Division quota.Config
	// Observer is told of the service's events; nil tells none.
	Observer Observer
	// Tracer traces report handling; nil traces nothing.
	Tracer trace.Tracer
	// Identity names the client of a stream from its context, "" for
	// none (default PeerIdentity). A stream's buckets are one client of
	// each division per identity, else per stream (docs/rlqs.md, "Client
	// identity").
	Identity func(ctx context.Context) string
	// RequireIdentity refuses streams without an identity, Unauthenticated.
	RequireIdentity bool

	storeClock bool // Clock was not given: demand is stamped by the store
}

func (o *Options) fill() error {
	if o.Rules == nil {
		return errors.New("rlqs: Options.Rules is required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.StoreLog == nil {
		o.StoreLog = &changeLog{log: o.Log.Named("rlqs")}
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Clock == nil {
		o.Clock, o.storeClock = clock.Wall{}, true
	}
	if o.Replica == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.Replica = hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(o.Replica, "/| ") {
		return fmt.Errorf("rlqs: replica name %q holds '/', '|' or a space", o.Replica)
	}
	if o.Identity == nil {
		o.Identity = PeerIdentity
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "ratelimit"
	}
	if o.ReportPeriod <= 0 {
		o.ReportPeriod = 5 * time.Second
	}
	if o.TTLPeriods <= 0 {
		o.TTLPeriods = DefaultTTLPeriods
	}
	if o.TTLPeriods < 2 {
		return fmt.Errorf("rlqs: an assignment must live at least 2 report periods, not %v", o.TTLPeriods)
	}
	if o.IdleAfter == 0 {
		o.IdleAfter = 10 * time.Minute
	}
	if o.StoreGrace <= 0 {
		o.StoreGrace = time.Duration(quota.TTL(o.ReportPeriod, o.TTLPeriods)) * time.Second
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = time.Second
	}
	if o.Refresh <= 0 {
		o.Refresh = o.ReportPeriod * 3 / 4
	}
	o.MaxBucketsPerStream = orDefault(o.MaxBucketsPerStream, DefaultMaxBucketsPerStream)
	o.MaxBuckets = orDefault(o.MaxBuckets, DefaultMaxBuckets)
	o.MaxStreams = orDefault(o.MaxStreams, DefaultMaxStreams)
	switch {
	case o.ReportWorkers == 0:
		o.ReportWorkers = DefaultReportWorkers()
	case o.ReportWorkers < 0:
		o.ReportWorkers = 0 // no bound
	}
	if o.IDLimits == nil {
		o.IDLimits = &limiter.DefaultLimits
	}
	o.Division.Period = o.ReportPeriod
	o.Division = o.Division.WithDefaults()
	return nil
}

// Clock tells the service the time and wakes it when a time has passed:
// a stream's silence ends it at the clock's Division.Stale after its last
// report. clock.Wall is the default; a test steps one of its own.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f, in a goroutine of its own, once d has passed on
	// the clock, unless the Timer's Stop is called first (it reports
	// whether it stopped the call). The service uses only Stop.
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// orDefault is n, def for 0, or no bound (math.MaxInt) if negative.
func orDefault(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return math.MaxInt
	}
	return n
}

// StateLog logs a condition's changes of state. Down and Up observe it
// failing and healthy, with the line to write if one is due, and report
// whether the state changed. It must be safe for concurrent use.
type StateLog interface {
	Down(msg string, fields ...zap.Field) bool
	Up(msg string, fields ...zap.Field) bool
}

// changeLog is Options' default StateLog: every change, one line.
type changeLog struct {
	log  *zap.Logger
	down atomic.Bool
}

func (c *changeLog) Down(msg string, fields ...zap.Field) bool {
	if c.down.Swap(true) {
		return false
	}
	c.log.Warn(msg, fields...)
	return true
}

func (c *changeLog) Up(msg string, fields ...zap.Field) bool {
	if !c.down.Swap(false) {
		return false
	}
	c.log.Info(msg, fields...)
	return true
}
