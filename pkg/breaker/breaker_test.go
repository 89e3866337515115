package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/breaker"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// flaky is a store whose health the test switches; it exercises the
// breaker's state machine, not any store's behaviour.
type flaky struct {
	down         bool
	takes, pings int
}

func (f *flaky) Take(context.Context, []limiter.Op, []limiter.Result) error {
	f.takes++
	if f.down {
		return limiter.ErrUnavailable
	}
	return nil
}

func (f *flaky) Ping(context.Context) error {
	f.pings++
	if f.down {
		return limiter.ErrUnavailable
	}
	return nil
}

func (f *flaky) Close() error { return nil }

func TestBreaker(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	store := &flaky{}
	var changes []string
	b := breaker.New(store, breaker.Options{Failures: 3, Cooldown: time.Second, Now: clock,
		OnChange: func(from, to breaker.State) { changes = append(changes, from.String()+">"+to.String()) }})
	ctx := context.Background()
	take := func() error { return b.Take(ctx, nil, nil) }

	steps := []struct {
		name      string
		down      bool
		advance   time.Duration
		wantErr   error
		wantState breaker.State
		wantTakes int // store calls so far
	}{
		{"healthy call", false, 0, nil, breaker.Closed, 1},
		{"failure 1", true, 0, limiter.ErrUnavailable, breaker.Closed, 2},
		{"failure 2", true, 0, limiter.ErrUnavailable, breaker.Closed, 3},
		{"failure 3 opens", true, 0, limiter.ErrUnavailable, breaker.Open, 4},
		{"open fails fast", true, 500 * time.Millisecond, breaker.ErrOpen, breaker.Open, 4},
		{"failed probe reopens", true, 600 * time.Millisecond, breaker.ErrOpen, breaker.Open, 4},
		{"still open within new cooldown", false, 500 * time.Millisecond, breaker.ErrOpen, breaker.Open, 4},
		{"good probe closes", false, 600 * time.Millisecond, nil, breaker.Closed, 5},
		{"failure count restarts", true, 0, limiter.ErrUnavailable, breaker.Closed, 6},
	}
	for _, s := range steps {
		store.down = s.down
		now = now.Add(s.advance)
		err := take()
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
		if b.State() != s.wantState || store.takes != s.wantTakes {
			t.Fatalf("%s: state %v takes %d, want %v %d", s.name, b.State(), store.takes, s.wantState, s.wantTakes)
		}
	}
	if !errors.Is(breaker.ErrOpen, limiter.ErrUnavailable) {
		t.Fatal("ErrOpen must wrap limiter.ErrUnavailable")
	}
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
}

func TestBreakerIgnoresCallerCancellation(t *testing.T) {
	store := &cancelled{}
	b := breaker.New(store, breaker.Options{Failures: 1})
	_ = b.Take(context.Background(), nil, nil)
	if b.State() != breaker.Closed {
		t.Fatal("a caller's cancellation opened the circuit")
	}
}

type cancelled struct{ flaky }

func (c *cancelled) Take(context.Context, []limiter.Op, []limiter.Result) error {
	return context.Canceled
}
