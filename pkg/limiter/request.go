package limiter

import (
	"errors"
	"fmt"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// Code is a descriptor's or a request's decision.
type Code uint8

// Decisions.
const (
	OK Code = iota
	OverLimit
)

func (c Code) String() string {
	if c == OverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

// Override is a request-supplied limit that replaces the configured one.
type Override struct {
	RequestsPerUnit uint32
	Unit            descriptors.Unit
}

// Descriptor is one descriptor of a request.
type Descriptor[E descriptors.KV] struct {
	Entries  []E
	Override *Override
	// Hits, when HasHits, is the descriptor's own hits addend, over the
	// request's; 0 checks without counting.
	Hits    uint64
	HasHits bool
	// Refund gives the hits back (Envoy's is_negative_hits; Op.Refund).
	Refund bool
}

// Request is a rate-limit request.
type Request[E descriptors.KV] struct {
	Domain      string
	Descriptors []Descriptor[E]
	HitsAddend  uint32 // hits per descriptor; 0 means 1
}

// Status is the decision for one descriptor.
type Status struct {
	Code Code
	// Limit is the limit that applied; nil when none matched or it was
	// Replaced. Of a rule with several (Parts), it is the one that denied
	// the request (the one to wait longest for, if several did) or, when
	// all allowed, the one with the least remaining in proportion to its
	// size, the first of equals; Remaining and the times are its own.
	Limit            *descriptors.Limit
	Remaining        uint32 // whole requests
	ResetMillis      int64  // until the window ends or the bucket is full
	RetryAfterMillis int64  // until the same hit could pass; 0 if OK
	Hits             uint64 // charged, or given back when Refund
	Refund           bool   // the hits were given back: Code is OK
	Shadowed         bool   // shadow mode turned an over-limit result OK
	Quota            bool   // a quota descriptor
	Replaced         bool
	// Parts are the statuses of each limit of a rule with several
	// (Limit.Joint), in its order, replaced ones left out, each as if the
	// limit were the descriptor's only one; nil otherwise. A part's Code
	// is its own limit's answer, though a joint denial charged none.
	Parts []Status

	dropped uint32 // bit i: Limit.Joint[i] was replaced
}

// Response is the decision for a whole request.
type Response struct {
	Code     Code
	Statuses []Status
}

// Limits bound the work one request can ask for.
type Limits struct {
	MaxDescriptors int // per request
	MaxEntries     int // per descriptor
	MaxEntryBytes  int // per entry key or value
}

// DefaultLimits are generous for any real Envoy configuration.
var DefaultLimits = Limits{MaxDescriptors: 1000, MaxEntries: 64, MaxEntryBytes: 4096}

// ErrInvalid marks requests that cannot be decided as given.
var ErrInvalid = errors.New("invalid request")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func (lim Limits) validate(domain string, n int) error {
	if domain == "" {
		return invalid("domain must not be empty")
	}
	if n == 0 {
		return invalid("at least one descriptor is required")
	}
	if lim.MaxDescriptors > 0 && n > lim.MaxDescriptors {
		return invalid("%d descriptors, more than the limit of %d", n, lim.MaxDescriptors)
	}
	return nil
}

// validateDescriptor checks descriptor i; one without entries is valid, as
// in envoyproxy/ratelimit (docs/rules.md, "Matching").
func validateDescriptor[E descriptors.KV](lim Limits, i int, d *Descriptor[E]) error {
	if lim.MaxEntries > 0 && len(d.Entries) > lim.MaxEntries {
		return invalid("descriptor %d has %d entries, more than the limit of %d", i, len(d.Entries), lim.MaxEntries)
	}
	if lim.MaxEntryBytes > 0 {
		for j, e := range d.Entries {
			if len(e.GetKey()) > lim.MaxEntryBytes || len(e.GetValue()) > lim.MaxEntryBytes {
				return invalid("descriptor %d entry %d is longer than %d bytes", i, j, lim.MaxEntryBytes)
			}
		}
	}
	if d.Override != nil && !d.Override.Unit.Valid() {
		return invalid("descriptor %d has a limit override with unit %s", i, d.Override.Unit)
	}
	return nil
}
