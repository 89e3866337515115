package rlqs

import (
	"testing"
	"time"
)

// TestCoveredBy: a time_elapsed less than a second short of the report
// period is the period (Envoy truncates 4.998 s to 4 s); any other reading
// is taken as it is.
func TestCoveredBy(t *testing.T) {
	const p = 5 * time.Second
	for _, tc := range []struct {
		elapsed, period, want time.Duration
	}{
		{0, p, 0},                               // a subscription
		{3 * time.Second, p, 3 * time.Second},   // a bucket born within the period
		{4 * time.Second, p, p},                 // a period read early
		{4500 * time.Millisecond, p, p},         // a client that sends fractions
		{p, p, p},                               // a period read late
		{6 * time.Second, p, 6 * time.Second},   // longer than a period
		{10 * time.Second, p, 10 * time.Second}, // two
		{time.Second, 2 * time.Second, 2 * time.Second},
		{time.Second, time.Second, time.Second}, // a 1 s period: a reading of 0 is a subscription
		{4 * time.Second, 0, 4 * time.Second},   // no period known
	} {
		if got := coveredBy(tc.elapsed, tc.period); got != tc.want {
			t.Errorf("coveredBy(%v, %v) = %v, want %v", tc.elapsed, tc.period, got, tc.want)
		}
	}
}
