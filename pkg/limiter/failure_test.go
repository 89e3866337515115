package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

func TestParseFailurePolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want limiter.FailurePolicy
		ok   bool
	}{
		{"error", limiter.FailError, true},
		{"allow", limiter.FailAllow, true},
		{"deny", limiter.FailDeny, true},
		{"", 0, false},
		{"Allow", 0, false},
		{"keep", 0, false},
	} {
		got, err := limiter.ParseFailurePolicy(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseFailurePolicy(%q) = %v, %v", tc.in, got, err)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

func TestDeadlineWithin(t *testing.T) {
	now := time.Unix(1000, 0)
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(20*time.Millisecond))
	defer cancel()
	for _, tc := range []struct {
		ctx  context.Context
		d    time.Duration
		want bool
	}{
		{ctx, 50 * time.Millisecond, true},
		{ctx, 20 * time.Millisecond, true},
		{ctx, 10 * time.Millisecond, false},
		{context.Background(), time.Hour, false},
	} {
		if got := limiter.DeadlineWithin(tc.ctx, now, tc.d); got != tc.want {
			t.Errorf("DeadlineWithin(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}
