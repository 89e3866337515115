// Package wait polls a condition until it holds or time runs out: the one
// polling loop of the tests, their harnesses and the benchmark tools.
package wait

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// The pause between two polls starts short, so that a wait ends soon
// after its condition holds, and doubles up to maxPause, so that a long
// wait does not load a busy machine.
const (
	minPause = 5 * time.Millisecond
	maxPause = 50 * time.Millisecond
)

var errNotYet = errors.New("condition false")

// Until calls cond until it returns nil, d passes or ctx is done. It
// returns nil, or cond's last error wrapped with d or with ctx's cause
// (context.Cause). cond runs at least once.
func Until(ctx context.Context, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	pause := minPause
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

// True reports whether cond holds within d, polling as Until does.
func True(d time.Duration, cond func() bool) bool {
	return Until(context.Background(), d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}

// For fails t unless cond holds within d.
func For(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	if !True(d, cond) {
		t.Fatalf("condition not met within %v", d)
	}
}
