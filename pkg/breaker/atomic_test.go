package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/breaker"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// flakyAll is a flaky store that also decides all or nothing.
type flakyAll struct {
	flaky
	all int
}

func (f *flakyAll) TakeAll(context.Context, []limiter.Op, []limiter.Result) error {
	f.all++
	if f.down {
		return limiter.ErrUnavailable
	}
	return nil
}

// TestBreakerTakeAll: TakeAll goes to the store's TakeAll and counts
// towards the circuit like Take; a store without TakeAll answers
// ErrNotAtomic and leaves the circuit closed.
func TestBreakerTakeAll(t *testing.T) {
	ctx := context.Background()
	store := &flakyAll{}
	b := breaker.New(store, breaker.Options{Failures: 2, Cooldown: time.Hour})
	if err := b.TakeAll(ctx, nil, nil); err != nil || store.all != 1 || store.takes != 0 {
		t.Fatalf("TakeAll = %v; store saw %d TakeAll, %d Take", err, store.all, store.takes)
	}
	store.down = true
	_ = b.TakeAll(ctx, nil, nil)
	_ = b.Take(ctx, nil, nil)
	if b.State() != breaker.Open {
		t.Fatalf("state %v after two failures, one of each kind", b.State())
	}
	if err := b.TakeAll(ctx, nil, nil); !errors.Is(err, breaker.ErrOpen) || store.all != 2 {
		t.Errorf("TakeAll with the circuit open = %v after %d store calls", err, store.all)
	}

	plain := breaker.New(&flaky{}, breaker.Options{Failures: 1})
	for range 3 {
		if err := plain.TakeAll(ctx, nil, nil); !errors.Is(err, limiter.ErrNotAtomic) {
			t.Fatalf("TakeAll on a plain store = %v, want ErrNotAtomic", err)
		}
	}
	if plain.State() != breaker.Closed {
		t.Errorf("ErrNotAtomic opened the circuit")
	}
}
