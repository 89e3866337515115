package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/guard/breaker"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// gateAll is a gate that also decides all or nothing; TakeAll answers by
// the store's health at once.
type gateAll struct {
	*gate
	all int
}

func (g *gateAll) TakeAll(context.Context, []limiter.Op, []limiter.Result) error {
	g.all++
	if g.down.Load() {
		return errReset
	}
	return nil
}

// TestBreakerTakeAll: TakeAll goes to the store's TakeAll and counts
// towards the circuit like Take; a store without TakeAll answers
// ErrNotAllOrNothing and leaves the circuit closed.
func TestBreakerTakeAll(t *testing.T) {
	ctx := context.Background()
	store := &gateAll{gate: newGate()}
	b := breaker.New(store, breaker.Options{Failures: 2, Cooldown: time.Hour})
	defer b.Close()
	if err := b.TakeAll(ctx, nil, nil); err != nil || store.all != 1 || store.takes.Load() != 0 {
		t.Fatalf("TakeAll = %v; store saw %d TakeAll, %d Take", err, store.all, store.takes.Load())
	}
	store.down.Store(true)
	_ = b.TakeAll(ctx, nil, nil)
	c := &call{settle: make(chan error, 1)}
	c.settle <- errReset
	_ = b.Take(context.WithValue(ctx, callKey{}, c), nil, nil)
	if b.State() != breaker.Open {
		t.Fatalf("state %v after two failures, one of each kind", b.State())
	}
	if err := b.TakeAll(ctx, nil, nil); !errors.Is(err, breaker.ErrOpen) || store.all != 2 {
		t.Errorf("TakeAll with the circuit open = %v after %d store calls", err, store.all)
	}

	plain := breaker.New(newGate(), breaker.Options{Failures: 1})
	defer plain.Close()
	for range 3 {
		if err := plain.TakeAll(ctx, nil, nil); !errors.Is(err, limiter.ErrNotAllOrNothing) {
			t.Fatalf("TakeAll on a plain store = %v, want ErrNotAllOrNothing", err)
		}
	}
	if plain.State() != breaker.Closed {
		t.Errorf("ErrNotAllOrNothing opened the circuit")
	}
}
