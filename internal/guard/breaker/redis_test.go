package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/guard/breaker"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestBreakerRedisOutOfMemory runs a Breaker over store.Redis on a real
// redis-server with maxmemory 1 and noeviction: PING answers, every script
// call fails OOM. Under steady load the circuit opens once and stays open
// (its probes are script calls, not PINGs: with PINGs it closed on every
// probe and opened again, two changes a Cooldown); once Redis has memory
// again, it closes at the next probe. No two changes come within one
// Cooldown. The breakers run on a fake clock, stepped a Cooldown at a time
// between rounds of calls.
func TestBreakerRedisOutOfMemory(t *testing.T) {
	addr := redistest.StartServer(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction").Addr
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ctx := context.Background()
	r, err := store.NewRedisFromURL("redis://"+addr, store.ConnOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ping(ctx); err != nil {
		t.Fatalf("PING of a Redis out of memory: %v", err)
	}
	const cooldown = 100 * time.Millisecond
	clk := newClock()
	var mu sync.Mutex
	var changes []time.Time
	var states []breaker.State
	op := []limiter.Op{{Key: "oom:{k}:", Algorithm: descriptors.FixedWindow, Limit: 1 << 40, Window: 60_000, Cost: 1000}}
	// round takes 20 decisions from 4 callers, then moves the clock a
	// Cooldown and waits for the prober, if one runs, to be done; it
	// returns how many decisions succeeded, failed at the store, and were
	// turned away by the circuit.
	round := func(b *breaker.Breaker) (ok, failed, open int) {
		var wg sync.WaitGroup
		var lmu sync.Mutex
		for range 4 {
			wg.Go(func() {
				res := make([]limiter.Result, 1)
				for range 5 {
					cctx, cancel := context.WithTimeout(ctx, patience)
					err := b.Take(cctx, op, res)
					cancel()
					lmu.Lock()
					switch {
					case err == nil:
						ok++
					case errors.Is(err, breaker.ErrOpen):
						open++
					case errors.Is(err, limiter.ErrUnavailable):
						failed++
					default:
						t.Errorf("Take: %v", err)
					}
					lmu.Unlock()
				}
			})
		}
		wg.Wait()
		probing := b.State() != breaker.Closed
		clk.Advance(cooldown)
		if probing { // the probe ran: the prober waits again, or the circuit closed
			wait.For(t, patience, func() bool {
				s := b.State()
				return s == breaker.Closed || s == breaker.Open && clk.Waiters() > 0
			})
		}
		return ok, failed, open
	}

	// For comparison, the same load on a breaker that can only PING:
	// every probe closes the circuit, and the next failures open it again.
	flaps := 0
	pingOnly := breaker.New(pingOnlyStore{r}, breaker.Options{Failures: 3, Cooldown: cooldown, ProbeTimeout: patience, Clock: clk,
		OnChange: func(_, to breaker.State) { flaps++ }})
	for range 15 {
		round(pingOnly)
	}
	_ = pingOnly.Close() // closes r too: open a fresh store for the breaker under test
	if flaps < 4 {
		t.Errorf("a breaker probing with PING changed state %d times in 15 cooldowns; the test cannot tell the two apart", flaps)
	}
	if r, err = store.NewRedisFromURL("redis://"+addr, store.ConnOptions{}, nil); err != nil {
		t.Fatal(err)
	}

	b := breaker.New(r, breaker.Options{Failures: 3, Cooldown: cooldown, ProbeTimeout: patience, Clock: clk,
		OnChange: func(_, to breaker.State) {
			mu.Lock()
			defer mu.Unlock()
			changes, states = append(changes, clk.Now()), append(states, to)
		}})
	defer b.Close()
	var ok, failed, open int
	for range 15 {
		o, f, n := round(b)
		ok, failed, open = ok+o, failed+f, open+n
	}
	t.Logf("out of memory, 15 cooldowns: %d ok, %d failed, %d turned away; probes are script calls", ok, failed, open)
	mu.Lock()
	n, first := len(states), states
	mu.Unlock()
	if ok != 0 || failed == 0 || open == 0 {
		t.Errorf("out of memory: %d ok, %d failed, %d turned away; want none ok, the circuit open", ok, failed, open)
	}
	if n != 1 || first[0] != breaker.Open || b.State() == breaker.Closed {
		t.Fatalf("state changes %v, state now %v; want one, to open, and open since", first, b.State())
	}

	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	clk.BlockUntil(t, 1) // the prober waits
	clk.Advance(cooldown)
	if !wait.True(patience, func() bool { return b.State() == breaker.Closed }) {
		t.Fatal("the circuit did not close at the first probe once Redis had memory again")
	}
	res := make([]limiter.Result, 1)
	if err := b.Take(ctx, op, res); err != nil {
		t.Fatalf("Take once closed: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 2 || states[1] != breaker.Closed {
		t.Errorf("state changes %v, want open then closed", states)
	}
	for i := 1; i < len(changes); i++ {
		if gap := changes[i].Sub(changes[i-1]); gap < cooldown {
			t.Errorf("changes %d and %d %v apart, less than the cooldown %v", i-1, i, gap, cooldown)
		}
	}
}

// pingOnlyStore hides a store's Probe: the breaker probes it with PING.
type pingOnlyStore struct{ limiter.Store }
