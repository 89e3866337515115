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
	// Hits, when HasHits, is the descriptor's own hits addend; it wins over
	// the request's, and 0 checks without counting.
	Hits    uint64
	HasHits bool
	// Refund gives the descriptor's hits back rather than charging them
	// (Envoy's RateLimitDescriptor.is_negative_hits): a fixed or sliding
	// window's count drops by them, never below empty; a token bucket
	// gains them as tokens, never above its burst. A refund always
	// answers OK, with what remains after it, and never makes a request
	// OVER_LIMIT; see Check for all-or-nothing requests.
	Refund bool
}

// Request is a rate-limit request.
type Request[E descriptors.KV] struct {
	Domain      string
	Descriptors []Descriptor[E]
	// HitsAddend is the request's hits per descriptor; 0 means 1.
	HitsAddend uint32
}

// Status is the decision for one descriptor.
type Status struct {
	Code Code
	// Limit is the limit that applied, nil when none did (no rule matched,
	// or the limit was replaced).
	Limit *descriptors.Limit
	// Remaining is what is left of the limit, in whole requests.
	Remaining uint32
	// ResetMillis is the time until the window ends or the bucket refills.
	ResetMillis int64
	// RetryAfterMillis is how long until the same hit could pass (0 if OK).
	RetryAfterMillis int64
	// Hits is what was charged, in hits (0 for a check without counting),
	// or given back when Refund.
	Hits uint64
	// Refund is true when the descriptor's hits were given back
	// (Descriptor.Refund): its Code is OK.
	Refund bool
	// Shadowed is true when an over-limit result was turned into OK by
	// shadow mode.
	Shadowed bool
	// Quota is true for descriptors of quota_mode rules.
	Quota bool
	// Replaced is true when a rule matched but another limit of the
	// request replaced it (Limit is then nil).
	Replaced bool
}

// Response is the decision for a whole request.
type Response struct {
	Code     Code
	Statuses []Status
}

// Limits on request size, to bound the work one call can ask for.
type Limits struct {
	MaxDescriptors int // per request
	MaxEntries     int // per descriptor
	MaxKeyBytes    int // per entry key or value
}

// DefaultLimits are generous for any real Envoy configuration.
var DefaultLimits = Limits{MaxDescriptors: 1000, MaxEntries: 64, MaxKeyBytes: 4096}

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

// validateDescriptor checks descriptor i of a request. A descriptor with
// no entries is valid, as in envoyproxy/ratelimit: it matches no rule and
// answers OK on its own, so that the request's other descriptors are still
// decided; with a limit override, the override applies to a key of the
// domain alone.
func validateDescriptor[E descriptors.KV](lim Limits, i int, d *Descriptor[E]) error {
	if lim.MaxEntries > 0 && len(d.Entries) > lim.MaxEntries {
		return invalid("descriptor %d has %d entries, more than the limit of %d", i, len(d.Entries), lim.MaxEntries)
	}
	if lim.MaxKeyBytes > 0 {
		for j, e := range d.Entries {
			if len(e.GetKey()) > lim.MaxKeyBytes || len(e.GetValue()) > lim.MaxKeyBytes {
				return invalid("descriptor %d entry %d is longer than %d bytes", i, j, lim.MaxKeyBytes)
			}
		}
	}
	if d.Override != nil && !d.Override.Unit.Valid() {
		return invalid("descriptor %d has a limit override with unit %s", i, d.Override.Unit)
	}
	return nil
}
