package rules_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// unitSeconds is every unit of the RateLimitConfig proto by name, with the
// window the reference gives it (utils.UnitToDivider: a month is 30 days,
// a year 365).
var unitSeconds = map[string]int64{
	"SECOND": 1,
	"MINUTE": 60,
	"HOUR":   3600,
	"DAY":    86400,
	"WEEK":   7 * 86400,
	"MONTH":  30 * 86400,
	"YEAR":   365 * 86400,
}

// xdsUnitLimit compiles one descriptor whose limit has unit u and returns
// its limit, or the error.
func xdsUnitLimit(u rlsconf.RateLimitUnit) (*descriptors.Limit, error) {
	r, err := rules.FromXDS([]*rlsconf.RateLimitConfig{{Name: "r", Domain: "d",
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: xdsPolicy(u, 5)}}}})
	if err != nil {
		return nil, err
	}
	l := descriptors.Match(r.Set.Domain("d"), []descriptors.Entry{{Key: "k", Value: "v"}})
	if l == nil {
		return nil, errors.New("no limit matches (k, v)")
	}
	return l, nil
}

// TestFromXDSEveryUnit walks every value the proto's RateLimitUnit enum
// declares, so that a proto bump that adds one fails here until xds.go
// maps it: UNKNOWN is a missing unit, every other value a unit of the same
// name and the reference's window.
func TestFromXDSEveryUnit(t *testing.T) {
	var numbers []int32
	for n := range rlsconf.RateLimitUnit_name {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	if len(numbers) != len(unitSeconds)+1 {
		t.Errorf("the proto declares %d units, the table %d (+UNKNOWN): update unitSeconds and xds.go", len(numbers), len(unitSeconds))
	}
	for _, n := range numbers {
		u := rlsconf.RateLimitUnit(n)
		t.Run(u.String(), func(t *testing.T) {
			l, err := xdsUnitLimit(u)
			if u == rlsconf.RateLimitUnit_UNKNOWN {
				if err == nil || !errorHas(err, "missing rate limit unit") {
					t.Fatalf("UNKNOWN: err %v, want missing rate limit unit", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unit %s (%d) refused: %v", u, n, err)
			}
			want, ok := unitSeconds[u.String()]
			if !ok {
				t.Fatalf("unit %s (%d) is not in unitSeconds", u, n)
			}
			if l.Unit.String() != u.String() || l.Unit.Seconds() != want || l.WindowMillis() != want*1000 {
				t.Errorf("unit %s (%d) compiled to %s (%d s), want %s (%d s)", u, n, l.Unit, l.Unit.Seconds(), u, want)
			}
			// FastLimit's units are numbered as Envoy numbers them, and the
			// RateLimitConfig proto numbers its units the same way.
			if int32(l.Unit) != n {
				t.Errorf("unit %s: FastLimit's number %d, the proto's %d", u, l.Unit, n)
			}
		})
	}
}

// TestFromXDSUnknownUnitNamesNumber sends unit numbers that no proto
// declares (a newer control plane's): each is refused, and the error names
// the number, as the reference's "invalid rate limit unit '<n>'" does.
func TestFromXDSUnknownUnitNamesNumber(t *testing.T) {
	for _, n := range []int32{8, 9, 42, 1 << 20, -1} {
		if _, declared := rlsconf.RateLimitUnit_name[n]; declared {
			t.Fatalf("unit %d is declared by the proto; pick another", n)
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			_, err := xdsUnitLimit(rlsconf.RateLimitUnit(n))
			want := fmt.Sprintf("resource 'r' descriptor d.k (descriptors[0]): invalid rate limit unit '%d'", n)
			if err == nil || err.Error() != want {
				t.Fatalf("err %v, want %q", err, want)
			}
			var ce *rules.Error
			if !errors.As(err, &ce) {
				t.Errorf("%v is not a *rules.Error", err)
			}
		})
	}
}

func errorHas(err error, msg string) bool {
	var ce *rules.Error
	return errors.As(err, &ce) && ce.Msg == msg
}
