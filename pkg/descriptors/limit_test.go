package descriptors_test

import (
	"math"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// parsed is a case of a parser of names: in, and what it parses to.
type parsed[T comparable] struct {
	in   string
	want T
	ok   bool
}

// checkParser runs parse, named name, on every case.
func checkParser[T comparable](t *testing.T, name string, parse func(string) (T, bool), cases []parsed[T]) {
	t.Helper()
	for _, c := range cases {
		if got, ok := parse(c.in); got != c.want || ok != c.ok {
			t.Errorf("%s(%q) = %v, %v; want %v, %v", name, c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestParseUnit(t *testing.T) {
	checkParser(t, "ParseUnit", descriptors.ParseUnit, []parsed[descriptors.Unit]{
		{"second", descriptors.Second, true},
		{"MINUTE", descriptors.Minute, true},
		{"Hour", descriptors.Hour, true},
		{"day", descriptors.Day, true},
		{"week", descriptors.Week, true},
		{"month", descriptors.Month, true},
		{"year", descriptors.Year, true},
		{"unknown", descriptors.UnitUnknown, false},
		{"", descriptors.UnitUnknown, false},
		{"seconds", descriptors.UnitUnknown, false},
	})
	if s := descriptors.Week.Seconds(); s != 7*86400 {
		t.Errorf("Week.Seconds() = %d", s)
	}
}

func TestParseAlgorithm(t *testing.T) {
	checkParser(t, "ParseAlgorithm", descriptors.ParseAlgorithm, []parsed[descriptors.Algorithm]{
		{"", descriptors.FixedWindow, true},
		{"fixed_window", descriptors.FixedWindow, true},
		{"Sliding_Window", descriptors.SlidingWindow, true},
		{"TOKEN_BUCKET", descriptors.TokenBucket, true},
		{"leaky_bucket", 0, false},
	})
	if s := descriptors.TokenBucket.String(); s != "token_bucket" {
		t.Errorf("TokenBucket.String() = %q", s)
	}
}

func TestNewLimit(t *testing.T) {
	l := descriptors.NewLimit(5, descriptors.Minute)
	if l.UnitMultiplier != 1 || l.Cost != descriptors.Milli || l.Burst != 5*descriptors.Milli || l.WindowMillis() != 60000 {
		t.Errorf("NewLimit = %+v", *l)
	}
	if num, den := l.RefillRate(); num != 1 || den != 12 { // 5000 milli per 60000 ms
		t.Errorf("RefillRate() = %d/%d, want 1/12", num, den)
	}
}

func TestValidate(t *testing.T) {
	ok := func() descriptors.Limit {
		return descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 10, UnitMultiplier: 1, Cost: descriptors.Milli}
	}
	for _, c := range []struct {
		name string
		edit func(*descriptors.Limit)
		want string // "" for valid
	}{
		{"valid", func(*descriptors.Limit) {}, ""},
		{"unlimited", func(l *descriptors.Limit) { *l = descriptors.Limit{Unlimited: true} }, ""},
		{"unlimited with unit", func(l *descriptors.Limit) { l.Unlimited = true }, "should not specify rate limit unit when unlimited"},
		{"missing unit", func(l *descriptors.Limit) { l.Unit = descriptors.UnitUnknown }, "missing rate limit unit"},
		{"invalid unit", func(l *descriptors.Limit) { l.Unit = 42 }, "invalid rate limit unit"},
		{"multiplier 1000", func(l *descriptors.Limit) { l.UnitMultiplier = 1000 }, ""},
		{"multiplier 1001", func(l *descriptors.Limit) { l.UnitMultiplier = 1001 }, "unit_multiplier 1001 is larger than 1000"},
		{"zero cost", func(l *descriptors.Limit) { l.Cost = 0 }, "cost must be positive"},
		{"negative burst", func(l *descriptors.Limit) { l.Burst = -1 }, "burst must not be negative"},
		{"token bucket", func(l *descriptors.Limit) {
			l.Algorithm, l.Burst = descriptors.TokenBucket, 20*descriptors.Milli
		}, ""},
		{"inexact token bucket", func(l *descriptors.Limit) {
			l.Algorithm, l.Unit, l.RequestsPerUnit, l.Burst = descriptors.TokenBucket, descriptors.Year, 7, 1e12
		}, "cannot be computed exactly"},
		{"the slowest rate, the largest burst", func(l *descriptors.Limit) {
			l.Algorithm, l.Unit, l.RequestsPerUnit, l.UnitMultiplier, l.Burst = descriptors.TokenBucket, descriptors.Year, 1, 1000, 249_914
		}, ""},
		{"the slowest rate, a burst its fill time makes inexact", func(l *descriptors.Limit) {
			l.Algorithm, l.Unit, l.RequestsPerUnit, l.UnitMultiplier, l.Burst = descriptors.TokenBucket, descriptors.Year, 1, 1000, 249_915
		}, "cannot be computed exactly"},
		{"the largest burst, one a 6 s", func(l *descriptors.Limit) {
			l.Algorithm, l.RequestsPerUnit, l.UnitMultiplier, l.Burst = descriptors.TokenBucket, 1, 6, descriptors.MaxAmount
		}, ""},
		{"the largest burst, one a 7 s", func(l *descriptors.Limit) {
			l.Algorithm, l.RequestsPerUnit, l.UnitMultiplier, l.Burst = descriptors.TokenBucket, 1, 7, descriptors.MaxAmount
		}, "cannot be computed exactly"},
		{"over the largest burst", func(l *descriptors.Limit) {
			l.Algorithm, l.Burst = descriptors.TokenBucket, descriptors.MaxAmount+1
		}, "burst 1125899906842.625 is larger than 1125899906842.624"},
		{"token bucket burst near overflow", func(l *descriptors.Limit) {
			l.Algorithm, l.Burst = descriptors.TokenBucket, math.MaxInt64
		}, "cannot be computed exactly"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := ok()
			c.edit(&l)
			err := l.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("Validate() = %v, want %q", err, c.want)
			}
		})
	}
}

// TestAllowance: a window admits its requests per unit, a token bucket
// its burst, whatever the other holds.
func TestAllowance(t *testing.T) {
	for _, c := range []struct {
		alg  descriptors.Algorithm
		want int64
	}{
		{descriptors.FixedWindow, 10 * descriptors.Milli},
		{descriptors.SlidingWindow, 10 * descriptors.Milli},
		{descriptors.TokenBucket, 25 * descriptors.Milli},
	} {
		l := descriptors.Limit{Algorithm: c.alg, RequestsPerUnit: 10, Burst: 25 * descriptors.Milli}
		if got := l.Allowance(); got != c.want {
			t.Errorf("%v: Allowance() = %d, want %d", c.alg, got, c.want)
		}
	}
}
