package xds_test

import (
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/source/xds"
)

func TestBackoffDelay(t *testing.T) {
	s := time.Second
	cases := []struct {
		name string
		b    xds.Backoff
		n    int
		rnd  float64
		want time.Duration
	}{
		// The reference's defaults: a factor below 1 keeps the initial wait.
		{"defaults first", xds.Backoff{}, 0, 0.5, 10 * s},
		{"defaults later", xds.Backoff{Jitter: true}, 5, 0.9, 10 * s},
		{"reference defaults spelt out", xds.Backoff{Initial: 10 * s, Max: 60 * s, Factor: 0.5, Jitter: true}, 3, 0.99, 10 * s},
		{"factor 2 no jitter", xds.Backoff{Initial: s, Max: 60 * s, Factor: 2}, 3, 0, 8 * s},
		{"factor 2 capped", xds.Backoff{Initial: s, Max: 60 * s, Factor: 2}, 10, 0, 60 * s},
		{"jitter low end", xds.Backoff{Initial: s, Max: 60 * s, Factor: 2, Jitter: true}, 3, 0, s},
		{"jitter midway", xds.Backoff{Initial: s, Max: 60 * s, Factor: 2, Jitter: true}, 3, 0.5, 4500 * time.Millisecond},
		{"jitter capped", xds.Backoff{Initial: s, Max: 5 * s, Factor: 2, Jitter: true}, 10, 0.99, 5 * s},
		{"initial above max", xds.Backoff{Initial: 9 * s, Max: 3 * s, Factor: 2}, 0, 0, 3 * s},
		{"huge attempt", xds.Backoff{Initial: s, Max: 60 * s, Factor: 3}, 10000, 0, 60 * s},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Delay(tc.n, func() float64 { return tc.rnd }); got != tc.want {
				t.Errorf("Delay(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}
