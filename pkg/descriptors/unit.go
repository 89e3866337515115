package descriptors

import "strings"

// Unit is the time unit of a rate limit. Its values mirror Envoy's
// RateLimitResponse.RateLimit.Unit enum so that conversion is a cast.
type Unit int32

// Units, numbered as in envoy.service.ratelimit.v3.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = map[Unit]string{
	Second: "SECOND", Minute: "MINUTE", Hour: "HOUR", Day: "DAY",
	Week: "WEEK", Month: "MONTH", Year: "YEAR",
}

// ParseUnit parses a unit name in any case; "unknown" is not one.
func ParseUnit(s string) (Unit, bool) {
	up := strings.ToUpper(s)
	for u, name := range unitNames {
		if name == up {
			return u, true
		}
	}
	return UnitUnknown, false
}

// Valid reports whether u is a known unit other than UnitUnknown.
func (u Unit) Valid() bool {
	_, ok := unitNames[u]
	return ok
}

// String returns the upper-case unit name, as Envoy spells it.
func (u Unit) String() string {
	if name, ok := unitNames[u]; ok {
		return name
	}
	return "UNKNOWN"
}

// Seconds returns the unit's length as the reference counts it (a month is
// 30 days, a year 365), or 0 for UnitUnknown.
func (u Unit) Seconds() int64 {
	switch u {
	case Second:
		return 1
	case Minute:
		return 60
	case Hour:
		return 3600
	case Day:
		return 86400
	case Week:
		return 7 * 86400
	case Month:
		return 30 * 86400
	case Year:
		return 365 * 86400
	}
	return 0
}
