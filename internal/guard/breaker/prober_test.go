package breaker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/guard/breaker"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// pingable is a store that answers Ping but decides nothing until ready
// (a Redis out of memory): Take and Probe fail while it is not.
type pingable struct {
	ready          atomic.Bool
	pings, probes  atomic.Int32
	takes, failing atomic.Int32
}

func (p *pingable) Take(context.Context, []limiter.Op, []limiter.Result) error {
	p.takes.Add(1)
	if !p.ready.Load() {
		p.failing.Add(1)
		return limiter.ErrUnavailable
	}
	return nil
}

func (p *pingable) Probe(context.Context) error {
	p.probes.Add(1)
	if !p.ready.Load() {
		return limiter.ErrUnavailable
	}
	return nil
}

func (p *pingable) Ping(context.Context) error { p.pings.Add(1); return nil }
func (p *pingable) Close() error               { return nil }

var _ breaker.Prober = (*pingable)(nil)

// TestBreakerProbesWithProbe: a store that answers Ping but fails every
// decision keeps the circuit open, probe after probe, because the breaker
// probes with Probe; the first Probe that succeeds closes it.
func TestBreakerProbesWithProbe(t *testing.T) {
	st, clk := &pingable{}, newClock()
	changes := make(chan string, 10)
	b := breaker.New(st, breaker.Options{Failures: 1, Cooldown: time.Second, Clock: clk,
		OnChange: func(from, to breaker.State) { changes <- from.String() + ">" + to.String() }})
	defer b.Close()
	_ = b.Take(context.Background(), nil, nil)
	if got := <-changes; got != "closed>open" {
		t.Fatalf("change %q", got)
	}
	for range 5 {
		awaitWait(t, clk)
		clk.Advance(time.Second)
	}
	awaitWait(t, clk) // the fifth probe failed: the prober waits again
	if st.probes.Load() != 5 || st.pings.Load() != 0 || b.State() != breaker.Open {
		t.Fatalf("%d probes, %d pings, state %v; want 5 probes, no ping, open", st.probes.Load(), st.pings.Load(), b.State())
	}
	st.ready.Store(true)
	clk.Advance(time.Second)
	awaitChange(t, changes, "open>closed", "a good probe closing the circuit")
}

// TestBreakerOneChangePerCooldown: a circuit that closed less than a
// Cooldown ago does not open again, however its calls fail; the first
// failure once the Cooldown has passed opens it.
func TestBreakerOneChangePerCooldown(t *testing.T) {
	h := newHarness(t, 2)
	h.once(errReset)
	h.once(errReset)
	if got := <-h.changes; got != "closed>open" {
		t.Fatalf("change %q", got)
	}
	awaitWait(t, h.clock)
	h.clock.Advance(time.Second) // the probe's Ping succeeds
	if got := <-h.changes; got != "open>closed" {
		t.Fatalf("change %q", got)
	}
	// Failures right after: counted, but the circuit stays closed.
	for range 5 {
		h.once(errReset)
	}
	h.clock.Advance(999 * time.Millisecond)
	h.once(errReset)
	if s := h.b.State(); s != breaker.Closed {
		t.Fatalf("state %v within a Cooldown of closing", s)
	}
	select {
	case got := <-h.changes:
		t.Fatalf("change %q within a Cooldown of the last", got)
	default:
	}
	h.clock.Advance(time.Millisecond)
	h.once(errReset)
	if got := <-h.changes; got != "closed>open" {
		t.Fatalf("change %q once the Cooldown passed", got)
	}
}
