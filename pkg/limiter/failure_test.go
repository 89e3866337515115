package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestParseFailurePolicy: every policy parses back from its name; other
// names, in another case too, are refused.
func TestParseFailurePolicy(t *testing.T) {
	for _, p := range []limiter.FailurePolicy{limiter.FailError, limiter.FailAllow, limiter.FailDeny} {
		if got, err := limiter.ParseFailurePolicy(p.String()); err != nil || got != p {
			t.Errorf("ParseFailurePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	for _, name := range []string{"", "Allow", "keep"} {
		if _, err := limiter.ParseFailurePolicy(name); err == nil {
			t.Errorf("ParseFailurePolicy(%q): no error", name)
		}
	}
}

// TestDeadlineWithin: a deadline at or before now+d is within d; none is
// never within.
func TestDeadlineWithin(t *testing.T) {
	now := time.Unix(1000, 0)
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(20*time.Millisecond))
	defer cancel()
	if !limiter.DeadlineWithin(ctx, now, 50*time.Millisecond) || !limiter.DeadlineWithin(ctx, now, 20*time.Millisecond) {
		t.Error("a deadline 20ms away is not within 20ms or 50ms")
	}
	if limiter.DeadlineWithin(ctx, now, 10*time.Millisecond) {
		t.Error("a deadline 20ms away is within 10ms")
	}
	if limiter.DeadlineWithin(context.Background(), now, time.Hour) {
		t.Error("no deadline is within an hour")
	}
}
