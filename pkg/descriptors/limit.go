package descriptors

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// Milli is the fixed-point scale of limits, costs and tokens: 1000 is one request.
const Milli = 1000

// MaxExact (2^53) bounds every intermediate value of the algorithms: float64
// and Redis' Lua numbers hold every integer below it exactly.
const MaxExact = 1 << 53

// MaxAmount (2^50) bounds a limit's Capacity and Burst, in milli-requests,
// so that any cost the stores take (up to 2^52) added stays below MaxExact.
const MaxAmount = 1 << 50

// Algorithm selects how a limit is enforced.
type Algorithm uint8

// Algorithms.
const (
	FixedWindow Algorithm = iota
	SlidingWindow
	TokenBucket
)

var algorithmNames = [...]string{"fixed_window", "sliding_window", "token_bucket"}

// String returns the algorithm's configuration name.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", a)
}

// ParseAlgorithm parses a configuration name; the empty string means
// FixedWindow.
func ParseAlgorithm(s string) (Algorithm, bool) {
	if s == "" {
		return FixedWindow, true
	}
	for i, name := range algorithmNames {
		if strings.EqualFold(name, s) {
			return Algorithm(i), true
		}
	}
	return 0, false
}

// Limit is one configured (or request-supplied) rate limit. A Limit is
// immutable once built and safe to share between goroutines.
type Limit struct {
	// Name is the limit's optional name, the target of other limits' Replaces.
	Name string
	// Unit and RequestsPerUnit are the limit as Envoy describes it.
	Unit            Unit
	RequestsPerUnit uint32
	// UnitMultiplier makes the window UnitMultiplier units long (>= 1).
	UnitMultiplier uint32
	// Unlimited limits always answer OK without touching the store.
	Unlimited bool
	Algorithm Algorithm
	// Burst is the token-bucket capacity in milli-requests.
	Burst int64
	// Cost is what one hit charges, in milli-requests (default Milli).
	Cost int64
	// Charge says whether a hit that does not fit is charged all the same.
	Charge Charge
	// Calendar, an IANA time zone, aligns the windows to its calendar
	// (Periods); "" aligns them to the Unix epoch, as the reference does.
	Calendar string
	// Replaces names the limits this one drops from a request.
	Replaces []string
	// The flags and metadata of the descriptor that holds the limit.
	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	ValueToMetric  bool
	Metadata       map[string]any
	// Path is the rule's readable path, "domain.key_value.key".
	Path string
	// Levels are the rule's path, one per entry it matches; nil for an override.
	Levels []Level
	// Source locates the rule, as its Descriptor's Source ("" for an override).
	Source string
	// Group is every limit of a rule with several (rate_limits), in file
	// order, this one at Group[Index]; nil for a rule's only limit. A
	// request passes such a rule only if each of them allows it, and is
	// charged to none of them if one does not.
	Group []*Limit
	Index int

	label         string    // Label, for one of a Group
	groupReplaces bool      // a limit of the Group replaces others
	calendar      *Calendar // compiled from Calendar by NewSet

	// shared[i] stands for the request's value at depth i in keys
	// (share_threshold), or "" for the request's own value.
	shared    []string
	hasShared bool
}

// Level is one configured level of a rule's path.
type Level struct {
	Key string
	// Value is "" for a key-only level; it may be a wildcard pattern.
	Value string
	// ShareThreshold is set only on wildcard levels.
	ValueToMetric, ShareThreshold bool
}

// NewLimit returns a fixed-window limit with defaults, as a request's override.
func NewLimit(rpu uint32, unit Unit) *Limit {
	l := &Limit{RequestsPerUnit: rpu, Unit: unit}
	l.fillDefaults()
	return l
}

func (l *Limit) fillDefaults() {
	if l.UnitMultiplier == 0 {
		l.UnitMultiplier = 1
	}
	if l.Cost == 0 {
		l.Cost = Milli
	}
	if l.Burst == 0 {
		l.Burst = l.Capacity()
	}
}

// WindowMillis returns the window length in milliseconds.
func (l *Limit) WindowMillis() int64 {
	m := int64(l.UnitMultiplier)
	if m == 0 {
		m = 1
	}
	return l.Unit.Seconds() * 1000 * m
}

// Capacity returns RequestsPerUnit in milli-requests.
func (l *Limit) Capacity() int64 { return int64(l.RequestsPerUnit) * Milli }

// Allowance returns the most the limit admits at once, in milli-requests:
// Burst for a token bucket, Capacity for a window.
func (l *Limit) Allowance() int64 {
	if l.Algorithm == TokenBucket {
		return l.Burst
	}
	return l.Capacity()
}

// Periods returns the calendar of the limit's windows, or nil when they
// are aligned to the Unix epoch (WindowMillis long each).
func (l *Limit) Periods() *Calendar { return l.calendar }

// SharedValue returns the share_threshold pattern that keys use at depth i.
func (l *Limit) SharedValue(i int) (string, bool) {
	if !l.hasShared || i >= len(l.shared) || l.shared[i] == "" {
		return "", false
	}
	return l.shared[i], true
}

// Validate checks the limit alone (unit, window, exact token-bucket
// arithmetic), not its Replaces against other limits.
func (l *Limit) Validate() error {
	if l.Unlimited {
		switch {
		case l.Unit != UnitUnknown:
			return fmt.Errorf("should not specify rate limit unit when unlimited")
		case l.Calendar != "":
			return fmt.Errorf("should not specify calendar when unlimited")
		case l.Charge != ChargeWhenAllowed:
			return fmt.Errorf("should not specify charge when unlimited")
		}
		return nil
	}
	if l.Unit == UnitUnknown {
		return errors.New("missing rate limit unit")
	}
	if !l.Unit.Valid() {
		return fmt.Errorf("invalid rate limit unit '%s'", l.Unit)
	}
	if l.UnitMultiplier > 1000 {
		return fmt.Errorf("unit_multiplier %d is larger than 1000", l.UnitMultiplier)
	}
	if l.Cost <= 0 {
		return fmt.Errorf("cost must be positive")
	}
	if l.Burst < 0 {
		return fmt.Errorf("burst must not be negative")
	}
	if l.Algorithm == TokenBucket && l.RequestsPerUnit == 0 {
		return fmt.Errorf("token_bucket needs requests_per_unit above 0 (it is the refill rate)")
	}
	if l.Algorithm == TokenBucket && !l.exactBucket() {
		return fmt.Errorf("token bucket %d per %d %s with burst %d cannot be computed exactly; use a rounder rate or a smaller burst",
			l.RequestsPerUnit, l.UnitMultiplier, strings.ToLower(l.Unit.String()), l.Burst/Milli)
	}
	if l.Burst > MaxAmount {
		return fmt.Errorf("burst %s is larger than %s", milli(l.Burst), milli(MaxAmount))
	}
	if l.Charge > ChargeAlways {
		return fmt.Errorf("unknown charge %s", l.Charge)
	}
	if l.Calendar != "" {
		if l.Algorithm == TokenBucket {
			return errors.New("calendar needs fixed_window or sliding_window: a token bucket has no windows")
		}
		if _, err := NewCalendar(l.Calendar, l.Unit, l.UnitMultiplier); err != nil {
			return err
		}
	}
	return nil
}

// maxNow is the latest decision time the stores take, Unix ms.
const maxNow = 1 << 50

// exactBucket reports whether a token bucket's numbers stay below MaxExact:
// (Burst + num) * den, and the time it takes to fill from empty after any
// time the stores take, when its key expires. Charged always, a bucket
// may hold down to -Burst: twice Burst below full.
func (l *Limit) exactBucket() bool {
	num, den := l.RefillRate()
	span := l.Burst
	if l.Charge == ChargeAlways {
		span *= 2
	}
	b, n, d := big.NewInt(span), big.NewInt(num), big.NewInt(den)
	if new(big.Int).Mul(new(big.Int).Add(b, n), d).Cmp(big.NewInt(MaxExact)) >= 0 {
		return false
	}
	fill := new(big.Int).Mul(b, d) // ceil(Burst * den / num)
	fill.Add(fill, big.NewInt(num-1)).Quo(fill, n)
	return fill.Cmp(big.NewInt(MaxExact-maxNow)) < 0
}

// RefillRate returns the refill rate, num/den milli-tokens per ms, reduced.
func (l *Limit) RefillRate() (num, den int64) {
	num, den = l.Capacity(), l.WindowMillis()
	if num == 0 || den == 0 {
		return 0, 1
	}
	g := gcd(num, den)
	return num / g, den / g
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
