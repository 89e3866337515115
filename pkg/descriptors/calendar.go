package descriptors

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Charge says when a limit is charged a request's hits.
type Charge uint8

// Charges.
const (
	// ChargeWhenAllowed charges a request only when it fits (a fixed
	// window counts a denied hit all the same, as the reference does).
	ChargeWhenAllowed Charge = iota
	// ChargeAlways charges a request even when it does not fit: a token
	// bucket goes below zero, a sliding window holds more than its limit,
	// and later requests wait until the debt is paid back.
	ChargeAlways
)

var chargeNames = [...]string{"when_allowed", "always"}

// String returns the charge's configuration name.
func (c Charge) String() string {
	if int(c) < len(chargeNames) {
		return chargeNames[c]
	}
	return fmt.Sprintf("charge(%d)", c)
}

// ParseCharge parses a configuration name; the empty string means
// ChargeWhenAllowed.
func ParseCharge(s string) (Charge, bool) {
	if s == "" {
		return ChargeWhenAllowed, true
	}
	for i, name := range chargeNames {
		if strings.EqualFold(name, s) {
			return Charge(i), true
		}
	}
	return 0, false
}

// Calendar cuts time into a limit's windows by the calendar of a time
// zone: days from midnight to midnight (23 or 25 hours on a day that
// changes to or from summer time), weeks from Monday, months from the
// 1st, years from January 1st; a multiplier of m makes each window m
// units, counted from 1970-01-01 (days), Monday 1970-01-05 (weeks),
// January 1970 (months) or year 0. A Calendar is immutable and safe for
// concurrent use.
type Calendar struct {
	zone string
	loc  *time.Location
	unit Unit
	mult int64
}

// Errors of NewCalendar.
var (
	ErrCalendarUnit = errors.New("calendar needs unit day, week, month or year")
	ErrZone         = errors.New("unknown time zone")
)

// NewCalendar returns the calendar of windows of multiplier units in the
// IANA time zone zone ("UTC", "Europe/Berlin"; "Local" is refused: it
// would differ from one server to the next).
func NewCalendar(zone string, unit Unit, multiplier uint32) (*Calendar, error) {
	switch unit {
	case Day, Week, Month, Year:
	default:
		return nil, fmt.Errorf("%w, not %s", ErrCalendarUnit, strings.ToLower(unit.String()))
	}
	if zone == "" || strings.EqualFold(zone, "local") {
		return nil, fmt.Errorf("%w '%s': name an IANA zone such as UTC or Europe/Berlin", ErrZone, zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w '%s'", ErrZone, zone)
	}
	return &Calendar{zone: zone, loc: loc, unit: unit, mult: int64(max(multiplier, 1))}, nil
}

// Zone returns the calendar's time zone, as configured.
func (c *Calendar) Zone() string { return c.zone }

// Period returns the window holding ms (Unix ms): its start and end, Unix
// ms, start <= ms < end.
func (c *Calendar) Period(ms int64) (start, end int64) {
	y, m, d := time.UnixMilli(ms).In(c.loc).Date()
	var from, to civil
	switch c.unit {
	case Day:
		k := floorDiv(days(y, m, d), c.mult) * c.mult
		from, to = civilDay(k), civilDay(k+c.mult)
	case Week:
		k := floorDiv(days(y, m, d)-4, 7*c.mult)*7*c.mult + 4 // 1970-01-05, day 4, was a Monday
		from, to = civilDay(k), civilDay(k+7*c.mult)
	case Month:
		k := floorDiv(int64(y)*12+int64(m)-1, c.mult) * c.mult
		from, to = civilMonth(k), civilMonth(k+c.mult)
	default: // Year
		k := floorDiv(int64(y), c.mult) * c.mult
		from, to = civil{int(k), time.January, 1}, civil{int(k + c.mult), time.January, 1}
	}
	return c.first(from), c.first(to)
}

// civil is a calendar date.
type civil struct {
	y int
	m time.Month
	d int
}

// days returns the days from 1970-01-01 to y-m-d.
func days(y int, m time.Month, d int) int64 {
	return floorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 86400)
}

func civilDay(n int64) civil {
	y, m, d := time.Unix(n*86400, 0).UTC().Date()
	return civil{y, m, d}
}

// civilMonth returns the 1st of month k, counted from January of year 0.
func civilMonth(k int64) civil {
	return civil{int(floorDiv(k, 12)), time.Month(k-floorDiv(k, 12)*12) + 1, 1}
}

// first returns the first instant of date d in the zone, Unix ms: its
// midnight, or, where the clocks skip midnight, the end of the gap.
func (c *Calendar) first(d civil) int64 {
	t := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, c.loc)
	if y, m, day := t.Date(); y != d.y || m != d.m || day != d.d {
		_, t = t.ZoneBounds() // midnight fell in a gap: time.Date answered the day before's
	}
	return t.UnixMilli()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
