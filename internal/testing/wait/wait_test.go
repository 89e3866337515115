package wait_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

func TestUntil(t *testing.T) {
	errLate := errors.New("late")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		holdsAt int // the call that returns nil; 0: none
		want    error
		says    string
	}{
		{"holds at once", context.Background(), 1, nil, ""},
		{"holds later", context.Background(), 4, nil, ""},
		{"never holds", context.Background(), 0, errLate, "not within 100ms: late"},
		{"ctx done", cancelled, 0, context.Canceled, "late"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := wait.Until(tc.ctx, 100*time.Millisecond, func() error {
				calls++
				if calls == tc.holdsAt {
					return nil
				}
				return errLate
			})
			if !errors.Is(err, tc.want) || (err != nil) != (tc.want != nil) || !strings.Contains(errString(err), tc.says) {
				t.Fatalf("Until = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if tc.holdsAt > 0 && calls != tc.holdsAt {
				t.Errorf("cond called %d times, want %d", calls, tc.holdsAt)
			}
		})
	}
}

func TestTrue(t *testing.T) {
	n := 0
	if !wait.True(5*time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Errorf("True over a condition that holds at the third call: n = %d", n)
	}
	start := time.Now()
	if wait.True(50*time.Millisecond, func() bool { return false }) {
		t.Error("True over a condition that never holds")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("True gave up after %v, before its 50ms", took)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
