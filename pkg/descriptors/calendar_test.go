package descriptors_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

func TestParseCharge(t *testing.T) {
	checkParser(t, "ParseCharge", descriptors.ParseCharge, []parsed[descriptors.Charge]{
		{"", descriptors.ChargeWhenAllowed, true},
		{"when_allowed", descriptors.ChargeWhenAllowed, true},
		{"Always", descriptors.ChargeAlways, true},
		{"sometimes", 0, false},
	})
	if s := descriptors.ChargeAlways.String(); s != "always" {
		t.Errorf("ChargeAlways.String() = %q", s)
	}
}

// TestCalendarPeriods: a calendar's periods, their bounds written from the
// calendar's facts (UTC offsets, weekdays, month lengths).
func TestCalendarPeriods(t *testing.T) {
	at := func(s string) int64 {
		ts, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return ts.UnixMilli()
	}
	for _, tc := range []struct {
		zone       string
		unit       descriptors.Unit
		mult       uint32
		now        string
		start, end string
	}{
		{"UTC", descriptors.Day, 1, "2027-03-15T10:00:00Z", "2027-03-15T00:00:00Z", "2027-03-16T00:00:00Z"},
		{"UTC", descriptors.Day, 3, "2027-03-16T10:00:00Z", "2027-03-15T00:00:00Z", "2027-03-18T00:00:00Z"},  // day 20892 = 3 * 6964
		{"UTC", descriptors.Week, 1, "2027-03-15T10:00:00Z", "2027-03-15T00:00:00Z", "2027-03-22T00:00:00Z"}, // a Monday
		{"UTC", descriptors.Week, 1, "2027-03-21T23:59:59Z", "2027-03-15T00:00:00Z", "2027-03-22T00:00:00Z"}, // the Sunday after
		{"UTC", descriptors.Week, 2, "2027-03-15T10:00:00Z", "2027-03-15T00:00:00Z", "2027-03-29T00:00:00Z"}, // week 2984 from 1970-01-05
		{"UTC", descriptors.Month, 1, "2027-02-28T23:59:59Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"},
		{"UTC", descriptors.Month, 1, "2028-02-29T12:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"UTC", descriptors.Month, 3, "2027-05-10T00:00:00Z", "2027-04-01T00:00:00Z", "2027-07-01T00:00:00Z"}, // quarters
		{"UTC", descriptors.Year, 1, "2027-12-31T23:59:59Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"UTC", descriptors.Year, 10, "2027-06-01T00:00:00Z", "2020-01-01T00:00:00Z", "2030-01-01T00:00:00Z"},
		// Berlin: CET +01:00, CEST +02:00 from 2027-03-28 02:00 CET to 2027-10-31 03:00 CEST.
		{"Europe/Berlin", descriptors.Month, 1, "2027-03-10T00:00:00Z", "2027-02-28T23:00:00Z", "2027-03-31T22:00:00Z"},
		{"Europe/Berlin", descriptors.Month, 1, "2027-02-28T23:00:00Z", "2027-02-28T23:00:00Z", "2027-03-31T22:00:00Z"},
		{"Europe/Berlin", descriptors.Month, 1, "2027-02-28T22:59:59Z", "2027-01-31T23:00:00Z", "2027-02-28T23:00:00Z"},
		{"Europe/Berlin", descriptors.Day, 1, "2027-03-28T12:00:00Z", "2027-03-27T23:00:00Z", "2027-03-28T22:00:00Z"},  // 23 h
		{"Europe/Berlin", descriptors.Day, 1, "2027-10-31T12:00:00Z", "2027-10-30T22:00:00Z", "2027-10-31T23:00:00Z"},  // 25 h
		{"Europe/Berlin", descriptors.Week, 1, "2027-03-28T12:00:00Z", "2027-03-21T23:00:00Z", "2027-03-28T22:00:00Z"}, // 167 h
		// Santiago skips midnight on 2024-09-08 (-04 to -03): the day starts at 01:00.
		{"America/Santiago", descriptors.Day, 1, "2024-09-08T12:00:00Z", "2024-09-08T04:00:00Z", "2024-09-09T03:00:00Z"},
		{"America/Santiago", descriptors.Day, 1, "2024-09-08T03:59:59Z", "2024-09-07T04:00:00Z", "2024-09-08T04:00:00Z"},
	} {
		c, err := descriptors.NewCalendar(tc.zone, tc.unit, tc.mult)
		if err != nil {
			t.Fatal(err)
		}
		start, end := c.Period(at(tc.now))
		if start != at(tc.start) || end != at(tc.end) {
			t.Errorf("%s %d %s at %s: [%s, %s), want [%s, %s)", tc.zone, tc.mult, tc.unit, tc.now,
				time.UnixMilli(start).UTC().Format(time.RFC3339), time.UnixMilli(end).UTC().Format(time.RFC3339), tc.start, tc.end)
		}
	}
}

// TestCalendarTiles: the periods tile time: each holds the instant asked
// about, and the next starts where it ends.
func TestCalendarTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, zone := range []string{"UTC", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Asia/Kolkata"} {
		for _, unit := range []descriptors.Unit{descriptors.Day, descriptors.Week, descriptors.Month, descriptors.Year} {
			for _, mult := range []uint32{1, 2, 7} {
				c, err := descriptors.NewCalendar(zone, unit, mult)
				if err != nil {
					t.Fatal(err)
				}
				for range 200 {
					ms := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + rng.Int64N(80*365*86_400_000)
					start, end := c.Period(ms)
					if start > ms || ms >= end {
						t.Fatalf("%s %d %s: %d not in [%d, %d)", zone, mult, unit, ms, start, end)
					}
					if s, e := c.Period(start); s != start || e != end {
						t.Fatalf("%s %d %s: the period at its start %d is [%d, %d)", zone, mult, unit, start, s, e)
					}
					if s, _ := c.Period(end); s != end {
						t.Fatalf("%s %d %s: the period after [%d, %d) starts at %d", zone, mult, unit, start, end, s)
					}
					if s, _ := c.Period(start - 1); s >= start {
						t.Fatalf("%s %d %s: the period before %d starts at %d", zone, mult, unit, start, s)
					}
				}
			}
		}
	}
}

func TestNewCalendarErrors(t *testing.T) {
	for _, tc := range []struct {
		zone string
		unit descriptors.Unit
		want error
	}{
		{"UTC", descriptors.Hour, descriptors.ErrCalendarUnit},
		{"UTC", descriptors.Second, descriptors.ErrCalendarUnit},
		{"Local", descriptors.Day, descriptors.ErrZone},
		{"", descriptors.Day, descriptors.ErrZone},
		{"Europe/Bonn", descriptors.Month, descriptors.ErrZone},
	} {
		if _, err := descriptors.NewCalendar(tc.zone, tc.unit, 1); !errors.Is(err, tc.want) {
			t.Errorf("NewCalendar(%q, %s) = %v, want %v", tc.zone, tc.unit, err, tc.want)
		}
	}
}
