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
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// DemandStore shares the demand of each (bucket, Envoy stream) among
// replicas. store.RedisDemand and store.MemoryDemand implement it.
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

// StorePolicy is what shares become while the demand store fails.
type StorePolicy uint8

// Policies for a failing demand store.
const (
	// Keep divides with the other replicas' demand as last read, for up to
	// Options.StoreGrace after the last successful exchange, then as
	// Split. The default: an outage shorter than the grace changes nothing.
	Keep StorePolicy = iota
	// Split divides this replica's part of each limit (the limit over the
	// number of replicas last seen serving the bucket) among its own
	// Envoys at once.
	Split
	// Allow assigns ALLOW_ALL to every limited bucket.
	Allow
	// Deny assigns DENY_ALL to every limited bucket.
	Deny
)

var policyNames = [...]string{"keep", "split", "allow", "deny"}

func (p StorePolicy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", p)
}

// ParseStorePolicy parses keep, split, allow or deny.
func ParseStorePolicy(s string) (StorePolicy, error) {
	for i, n := range policyNames {
		if strings.EqualFold(s, n) {
			return StorePolicy(i), nil
		}
	}
	return 0, fmt.Errorf("store failure policy %q is not keep, split, allow or deny", s)
}

// PolicyFor maps a value of --on-store-error (allow, deny or error) onto
// the quota service's policy: allow and deny as themselves, error (which
// has no meaning on a stream) as Keep.
func PolicyFor(onStoreError string) (StorePolicy, error) {
	switch onStoreError {
	case "allow":
		return Allow, nil
	case "deny":
		return Deny, nil
	case "error", "":
		return Keep, nil
	}
	return 0, fmt.Errorf("--on-store-error %q is not allow, deny or error", onStoreError)
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
	// Quota tunes the division (package quota's defaults; its Period is
	// ReportPeriod).
	Quota quota.Config
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
	o.Quota.Period = o.ReportPeriod
	o.Quota = o.Quota.WithDefaults()
	return nil
}
