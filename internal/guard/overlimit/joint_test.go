package overlimit_test

import (
	"context"
	"testing"

	"github.com/fastlimit/fastlimit/internal/guard/overlimit"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestJointPassesThrough: the ops of a joint (limiter.Op.Joined) always
// reach the store, and their denials are not held: answering one of them
// would leave the store charging the others.
func TestJointPassesThrough(t *testing.T) {
	clk := newClock()
	f := &fake{next: func(limiter.Op) limiter.Result { return *deny(300) }}
	c := overlimit.New(f, overlimit.Options{MaxEntries: 10, Clock: clk})
	other := with(fixed, func(op *limiter.Op) { op.Key = "other" })
	joint := []limiter.Op{fixed, with(other, func(op *limiter.Op) { op.Joined = true })}
	res := make([]limiter.Result, 2)
	for i := range 3 {
		if err := c.Take(context.Background(), joint, res); err != nil {
			t.Fatal(err)
		}
		if _, seen := f.reset(); len(seen) != 2 {
			t.Fatalf("call %d: %d ops reached the store, want both", i, len(seen))
		}
	}
	// Alone, the same key's denial is held as before.
	one := make([]limiter.Result, 1)
	for range 2 {
		if err := c.Take(context.Background(), []limiter.Op{fixed}, one); err != nil {
			t.Fatal(err)
		}
	}
	if calls, _ := f.reset(); calls != 1 {
		t.Errorf("the op alone reached the store %d times, want once", calls)
	}
}

// TestDebitPassesThrough: an op charged even when denied (limiter.Op.Debit,
// charge: always) always reaches the store, which must charge it, even on
// a key whose denial is held; and its own denials are not held.
func TestDebitPassesThrough(t *testing.T) {
	clk := newClock()
	f := &fake{next: func(limiter.Op) limiter.Result { return *deny(300) }}
	c := overlimit.New(f, overlimit.Options{MaxEntries: 10, Clock: clk})
	debit := with(fixed, func(op *limiter.Op) { op.Debit = true })
	one := make([]limiter.Result, 1)
	take := func(op limiter.Op) int {
		t.Helper()
		if err := c.Take(context.Background(), []limiter.Op{op}, one); err != nil {
			t.Fatal(err)
		}
		calls, _ := f.reset()
		return calls
	}
	take(fixed) // the key's denial is held
	if calls := take(debit); calls != 1 {
		t.Errorf("a debit op on a held key reached the store %d times, want once", calls)
	}
	c = overlimit.New(f, overlimit.Options{MaxEntries: 10, Clock: clk}) // empty
	take(debit)                                                         // denied: not held
	if calls := take(fixed); calls != 1 {
		t.Errorf("after a debit op's denial, the op reached the store %d times, want once", calls)
	}
}
