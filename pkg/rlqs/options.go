package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// DemandStore shares the demand of each (bucket, Envoy stream) among
// replicas. demand.Redis and demand.Memory implement it.
//
// Exchange writes or deletes each item's client in its bucket, every value
// living ttl, and returns for each item with quota.Read every live demand
// of its bucket (after the exchange's writes), nil for the others: one
// round trip. now stamps the values; zero means the store's own clock.
// An error means nothing can be assumed of the exchange; it must be safe
// to send one again (writes are idempotent). It must be safe for
// concurrent use and honour ctx.
type DemandStore interface {
	Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error)
}

// Unmatched is what a bucket that matches no rule (or whose domain has no
// rules) is assigned.
type Unmatched uint8

// Answers for unmatched buckets.
const (
	// UnmatchedAllow assigns ALLOW_ALL, as RateLimitService answers OK for
	// a descriptor no rule matches.
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

// StorePolicy is what shares become while the demand store fails: the
// shared failure policies (allow, deny) and two of RLQS's own.
type StorePolicy uint8

// Policies for a failing demand store.
const (
	// StoreKeep divides with the other replicas' demand as last read, for
	// up to Options.StoreGrace after the last successful exchange, then as
	// StoreSplit. The default.
	StoreKeep StorePolicy = iota
	// StoreSplit divides this replica's part of each limit (the limit over
	// the replicas last seen serving the bucket) among its own Envoys.
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

// PolicyFor is the policy that follows the RateLimitService's failure
// policy p: allow and deny as themselves, error (which has no meaning on
// a stream) as StoreKeep.
func PolicyFor(p limiter.FailurePolicy) StorePolicy {
	switch p {
	case limiter.FailAllow:
		return StoreAllow
	case limiter.FailDeny:
		return StoreDeny
	}
	return StoreKeep
}

// Options configure a Service. Rules is required; zero values of the
// others are the defaults documented on each.
type Options struct {
	// Rules returns the rules in force (nil before any are loaded: every
	// bucket is then unmatched). It is called on every report.
	Rules func() *descriptors.Set
	// Store shares demand among replicas; nil divides each limit among
	// this replica's Envoys alone.
	Store DemandStore
	// Log receives the service's errors; nil discards them.
	Log *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Replica names this replica in the store: letters, digits, '-', '_',
	// '.', ':' (default: random). Two live replicas must not share one.
	Replica string
	// KeyPrefix starts the store keys (default "ratelimit", as the
	// RateLimitService's keys).
	KeyPrefix string
	// ReportPeriod is the period at which Envoys report (default 5s:
	// Envoy's, which its configuration cannot change today).
	ReportPeriod time.Duration
	// TTLPeriods is an assignment's life in report periods (default 3).
	TTLPeriods float64
	// IdleAfter abandons a bucket of an Envoy that reported no request in
	// it for this long (default 10 minutes; negative: never).
	IdleAfter time.Duration
	// Unmatched is the answer for buckets no rule matches.
	Unmatched Unmatched
	// OnStoreError is the policy while the store fails.
	OnStoreError StorePolicy
	// StoreGrace bounds Keep (default: one assignment TTL).
	StoreGrace time.Duration
	// StoreTimeout bounds one exchange with the store (default 1s).
	StoreTimeout time.Duration
	// Refresh is how old another replica's demand may be before a report
	// reads it again (default one report period).
	Refresh time.Duration
	// Division tunes the division (package quota's defaults; its Period
	// is ReportPeriod).
	Division quota.Config
	// Observer is told of the service's events; nil tells none.
	Observer Observer
	// Tracer traces report handling; nil traces nothing.
	Tracer trace.Tracer

	storeClock bool // Now was not given: demand is stamped by the store
}

func (o *Options) fill() error {
	if o.Rules == nil {
		return errors.New("rlqs: Options.Rules is required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Now == nil {
		o.Now, o.storeClock = time.Now, true
	}
	if o.Replica == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.Replica = hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(o.Replica, "/ ") {
		return fmt.Errorf("rlqs: replica name %q holds '/' or a space", o.Replica)
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "ratelimit"
	}
	if o.ReportPeriod <= 0 {
		o.ReportPeriod = 5 * time.Second
	}
	if o.TTLPeriods <= 0 {
		o.TTLPeriods = 3
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
		o.Refresh = o.ReportPeriod
	}
	o.Division.Period = o.ReportPeriod
	o.Division = o.Division.WithDefaults()
	return nil
}
