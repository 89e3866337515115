package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// gate is a sendFunc that records each send's ops and blocks every send
// until released, answering each op with Remaining = its Cost.
type gate struct {
	mu      sync.Mutex
	sends   [][]limiter.Op
	started chan int // the number of ops of each send, as it starts
	release chan struct{}
	err     error
}

func newGate() *gate {
	return &gate{started: make(chan int, 100), release: make(chan struct{})}
}

func (g *gate) send(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	g.mu.Lock()
	g.sends = append(g.sends, append([]limiter.Op(nil), ops...))
	g.mu.Unlock()
	g.started <- len(ops)
	<-g.release
	for i := range ops {
		results[i] = limiter.Result{Allowed: true, Remaining: ops[i].Cost}
	}
	return g.err
}

func op(cost int64) []limiter.Op { return []limiter.Op{{Key: "k", Cost: cost}} }

// TestBatcherMergesWhileBusy: calls that arrive while the only slot is busy
// leave together in the next send, and each gets its own answer.
func TestBatcherMergesWhileBusy(t *testing.T) {
	g := newGate()
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- b.take(ctx, op(1), make([]limiter.Result, 1)) }()
	if n := <-g.started; n != 1 {
		t.Fatalf("first send carried %d ops, want 1", n)
	}
	const waiting = 10
	var wg sync.WaitGroup
	errs := make([]error, waiting)
	res := make([][]limiter.Result, waiting)
	for i := range waiting {
		res[i] = make([]limiter.Result, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.take(ctx, op(int64(100+i)), res[i])
		}()
	}
	waitQueued(t, b, waiting)
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := <-g.started; n != waiting {
		t.Fatalf("second send carried %d ops, want all %d waiting calls", n, waiting)
	}
	wg.Wait()
	for i := range waiting {
		if errs[i] != nil || res[i][0].Remaining != int64(100+i) {
			t.Errorf("call %d: %v %+v, want its own answer %d", i, errs[i], res[i][0], 100+i)
		}
	}
	if s := b.Stats(); s.Sends != 2 || s.Ops != 1+waiting {
		t.Errorf("stats %+v, want 2 sends of %d ops", s, 1+waiting)
	}
}

// TestBatcherTooLate: a call taken for a send with less time left than
// twice the last send took, and less than a tenth of its time, is answered
// ErrNotSent and not sent; one with more is sent.
func TestBatcherTooLate(t *testing.T) {
	now := time.Now()
	w := func(budget, left time.Duration) *waiter {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(left))
		t.Cleanup(cancel)
		return &waiter{ctx: ctx, arrived: now.Add(left - budget)}
	}
	for _, tc := range []struct {
		name string
		w    *waiter
		last time.Duration
		want bool
	}{
		{"no send yet", w(50*time.Millisecond, time.Millisecond), 0, false},
		{"sends take 3 ms, 1 ms left of 50", w(50*time.Millisecond, time.Millisecond), 3 * time.Millisecond, true},
		{"sends take 3 ms, 10 ms left of 50", w(50*time.Millisecond, 10*time.Millisecond), 3 * time.Millisecond, false},
		{"a send took 80 ms (a stall), 6 ms left of 50: a tenth is always sent", w(50*time.Millisecond, 6*time.Millisecond), 80 * time.Millisecond, false},
		{"a send took 80 ms, 4 ms left of 50", w(50*time.Millisecond, 4*time.Millisecond), 80 * time.Millisecond, true},
	} {
		if got := tooLate(tc.w, now, tc.last); got != tc.want {
			t.Errorf("%s: tooLate = %v, want %v", tc.name, got, tc.want)
		}
	}

	// In a batcher: after a send that took an hour, a call with a minute
	// left of its two hours is answered at once and not sent. (Durations a
	// busy machine cannot outrun: a call whose deadline has passed before
	// the send looks at it is left to its caller, who is not here.)
	g := newGate()
	close(g.release)
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second})
	b.lastSend.Store(int64(time.Hour))
	late := w(2*time.Hour, time.Minute)
	late.ops, late.results, late.done = op(1), make([]limiter.Result, 1), make(chan struct{})
	late.state.Store(waiting)
	b.mu.Lock()
	b.busy++
	b.mu.Unlock()
	b.sendMerged([]*waiter{late})
	b.mu.Lock()
	b.busy--
	b.mu.Unlock()
	<-late.done
	if !errors.Is(late.err, ErrNotSent) || b.Stats().Sends != 0 {
		t.Errorf("late call: %v, %d sends; want ErrNotSent and no send", late.err, b.Stats().Sends)
	}
}

// TestBatcherDropsCallsThatGaveUp: a call whose context ends while it
// waits for a send is never sent, and says so.
func TestBatcherDropsCallsThatGaveUp(t *testing.T) {
	g := newGate()
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second})
	go func() { _ = b.take(context.Background(), op(1), make([]limiter.Result, 1)) }()
	<-g.started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := b.take(ctx, op(2), make([]limiter.Result, 1))
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("call that gave up while waiting = %v, want ErrNotSent (and ErrUnavailable)", err)
	}
	// A later call still goes out, without the dropped one.
	done := make(chan error, 1)
	go func() { done <- b.take(context.Background(), op(3), make([]limiter.Result, 1)) }()
	waitQueued(t, b, 2)
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.sends {
		for _, o := range s {
			if o.Cost == 2 {
				t.Fatalf("the call that gave up was sent: %+v", g.sends)
			}
		}
	}
}

// TestBatcherCallerLeavesDuringSend: a call that gives up once its send
// has started gets its context's error, not ErrNotSent, and the send no
// longer touches its results.
func TestBatcherCallerLeavesDuringSend(t *testing.T) {
	g := newGate()
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	res := make([]limiter.Result, 1)
	done := make(chan error, 1)
	go func() { done <- b.take(ctx, op(7), res) }()
	<-g.started
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotSent) {
		t.Errorf("caller gone during its send = %v, want the context's error", err)
	}
	res[0].Remaining = -1 // the caller owns its results again
	close(g.release)
	waitIdle(t, b)
	if res[0].Remaining != -1 {
		t.Errorf("the send wrote into the results of a caller that left: %+v", res[0])
	}
}

// takeAsync takes ops of cost in b on a goroutine of its own, and returns
// the channel of its error.
func takeAsync(ctx context.Context, b *batcher, cost int64) chan error {
	done := make(chan error, 1)
	go func() { done <- b.take(ctx, op(cost), make([]limiter.Result, 1)) }()
	return done
}

// setRate sets the rate b's sends see calls arrive at, calls a second,
// early and late in their waits.
func setRate(b *batcher, rate float64) {
	b.mu.Lock()
	b.all = rateOf{rate: rate, known: true}
	b.late = rateOf{rate: rate, known: true}
	b.mu.Unlock()
}

// sent receives the ops of g's next send, failing t if none starts.
func sent(t *testing.T, g *gate) int {
	t.Helper()
	select {
	case n := <-g.started:
		return n
	case <-time.After(30 * time.Second):
		t.Fatal("no send started")
		return 0
	}
}

// noSend fails t if g has a send started.
func noSend(t *testing.T, g *gate) {
	t.Helper()
	if len(g.started) > 0 {
		t.Fatalf("a send of %d ops left", <-g.started)
	}
}

// TestBatcherLoneCallerNeverWaits: one caller, each call made once the
// last is answered, never sees a send active when it arrives: its calls
// never wait for company, however long the window, and the rate its sends
// see stays 0.
func TestBatcherLoneCallerNeverWaits(t *testing.T) {
	g := newGate()
	close(g.release)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	b := newBatcher(g.send, batchOptions{Slots: 2, MaxOps: 1000, Timeout: time.Second, Gather: time.Hour, Clock: clk})
	for i := range 50 {
		done := takeAsync(context.Background(), b, int64(i))
		if n := sent(t, g); n != 1 {
			t.Fatalf("lone call %d went in a send of %d ops", i, n)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond) // the caller's own time between calls
	}
	waitIdle(t, b)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.all.rate != 0 || b.all.seen != 0 || len(clk.Pending()) != 0 {
		t.Errorf("rate %v, %d seen, timers %v: a lone caller's calls counted as company", b.all.rate, b.all.seen, clk.Pending())
	}
}

// TestBatcherGathersCompany: where calls arrive while sends are active (an
// open loop), a send waits up to Gather from its oldest call's arrival,
// and leaves at an arrival once the rest of the window is expected to
// bring less than lastCompany.
func TestBatcherGathersCompany(t *testing.T) {
	g := newGate()
	close(g.release)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	b := newBatcher(g.send, batchOptions{Slots: 2, MaxOps: 1000, Timeout: time.Second, Gather: time.Millisecond, Clock: clk})
	setRate(b, 2000) // 2 calls expected in a window
	ctx := context.Background()
	first := takeAsync(ctx, b, 1)
	clk.BlockUntil(t, 1)
	if left := clk.Pending(); left[0] != time.Millisecond {
		t.Fatalf("the send waits %v, want Gather", left)
	}
	clk.Advance(300 * time.Microsecond)
	second := takeAsync(ctx, b, 2) // 0.7 ms left: 1.4 expected
	waitQueued(t, b, 2)
	noSend(t, g)
	clk.Advance(500 * time.Microsecond)
	third := takeAsync(ctx, b, 3) // 0.2 ms left: 0.4 expected
	if n := sent(t, g); n != 3 {
		t.Fatalf("send of %d ops, want the 3 calls", n)
	}
	for _, done := range []chan error{first, second, third} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// Alone all the window: it leaves when the window ends.
	setRate(b, 2000)
	done := takeAsync(ctx, b, 4)
	clk.BlockUntil(t, 1)
	clk.Advance(999 * time.Microsecond)
	noSend(t, g)
	clk.Advance(time.Microsecond)
	if n := sent(t, g); n != 1 {
		t.Fatalf("send of %d ops, want 1", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Below one call expected a window, sends do not wait.
	setRate(b, 900)
	done = takeAsync(ctx, b, 5)
	if n := sent(t, g); n != 1 || len(clk.Pending()) != 0 {
		t.Fatalf("send of %d ops, timers %v: a send waited at 0.9 expected", n, clk.Pending())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBatcherGatherWindowFromArrival: a call waits for company at most
// Gather from its arrival, the time it waited for a slot included.
func TestBatcherGatherWindowFromArrival(t *testing.T) {
	g := newGate()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second, Gather: time.Millisecond, Clock: clk})
	ctx := context.Background()
	first := takeAsync(ctx, b, 1)
	if n := sent(t, g); n != 1 {
		t.Fatalf("first send of %d ops", n)
	}
	setRate(b, 2000)
	clk.Advance(200 * time.Microsecond)
	second, third := takeAsync(ctx, b, 2), takeAsync(ctx, b, 3)
	waitQueued(t, b, 2)
	clk.Advance(900 * time.Microsecond) // the oldest has waited 0.9 ms
	g.release <- struct{}{}
	clk.BlockUntil(t, 1)
	if left := clk.Pending(); left[0] != 100*time.Microsecond {
		t.Fatalf("the next send waits %v, want the 0.1 ms its oldest call has left", left)
	}
	clk.Advance(200 * time.Microsecond)
	if n := sent(t, g); n != 2 {
		t.Fatalf("second send of %d ops, want 2", n)
	}
	close(g.release)
	for _, done := range []chan error{first, second, third} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatcherGatherEnds: a send stops waiting once GatherOps ops wait, and
// no call waits for company past a tenth of the time it had.
func TestBatcherGatherEnds(t *testing.T) {
	g := newGate()
	close(g.release)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second, Gather: time.Hour, GatherOps: 4, Clock: clk})
	setRate(b, 1)
	ctx := context.Background()
	var dones []chan error
	for i := range 4 {
		dones = append(dones, takeAsync(ctx, b, int64(i)))
		if i == 0 {
			clk.BlockUntil(t, 1)
		}
	}
	if n := sent(t, g); n != 4 {
		t.Fatalf("send of %d ops, want the 4 of GatherOps", n)
	}
	for _, done := range dones {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	setRate(b, 1)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := takeAsync(dctx, b, 9)
	clk.BlockUntil(t, 1)
	if left := clk.Pending()[0]; left > time.Second || left < 500*time.Millisecond {
		t.Fatalf("a call with 10 s left waits %v for company, want at most a tenth", left)
	}
	clk.Advance(time.Second)
	if n := sent(t, g); n != 1 {
		t.Fatalf("send of %d ops", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBatcherOneGathers: while a send gathers, calls join it rather than
// take a free slot, and a slot whose send ends then leaves what waits to
// it: one send, not two.
func TestBatcherOneGathers(t *testing.T) {
	g := newGate()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	b := newBatcher(g.send, batchOptions{Slots: 2, MaxOps: 1000, Timeout: time.Second, Gather: time.Millisecond, Clock: clk})
	ctx := context.Background()
	first := takeAsync(ctx, b, 1) // rate 0: at once
	if n := sent(t, g); n != 1 {
		t.Fatalf("first send of %d ops", n)
	}
	setRate(b, 5000)
	second := takeAsync(ctx, b, 2)
	clk.BlockUntil(t, 1)
	third := takeAsync(ctx, b, 3)
	waitQueued(t, b, 2)
	g.release <- struct{}{} // the first slot's send ends; it finds the second gathering
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !wait.True(5*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.busy == 1 }) {
		t.Fatal("the slot whose send ended did not leave the waiting calls to the gathering send")
	}
	noSend(t, g)
	clk.Advance(time.Millisecond)
	if n := sent(t, g); n != 2 {
		t.Fatalf("send of %d ops, want the 2 calls", n)
	}
	close(g.release)
	for _, done := range []chan error{second, third} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, b)
	if s := b.Stats(); s.Sends != 2 {
		t.Errorf("%d sends, want 2", s.Sends)
	}
}

// TestBatcherGathersWhenMany: once sends are due with gatherFrom calls
// waiting on average (many callers, each waiting for its answer), a send
// waits Gather from when it is due, whatever the calls' arrival times.
func TestBatcherGathersWhenMany(t *testing.T) {
	g := newGate()
	close(g.release)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second, Gather: 3 * time.Second, Clock: clk})
	setRate(b, 10) // company rare, but many wait
	b.mu.Lock()
	b.avgReady = 2 * gatherFrom
	b.mu.Unlock()
	var dones []chan error
	for i := range 4 {
		dones = append(dones, takeAsync(context.Background(), b, int64(10+i)))
		if i == 0 {
			clk.BlockUntil(t, 1)
		}
		waitQueued(t, b, i+1)
		clk.Advance(50 * time.Millisecond)
	}
	noSend(t, g)
	clk.Advance(3 * time.Second)
	if n := sent(t, g); n != 4 {
		t.Errorf("calls arriving 50 ms apart while gathering went in a send of %d ops, want all 4", n)
	}
	for _, done := range dones {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatcherGathersAsAGroup: batchers that share a gatherGroup (a
// Cluster's masters) gather when the calls waiting at all of them add up
// to gatherFrom, though each sees fewer; without the others' share, the
// same load does not gather.
func TestBatcherGathersAsAGroup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		others float64 // what waits at the group's other batcher
		want   []int   // ops of the sends of 4 calls arriving 50 ms apart
	}{
		{"others busy", gatherFrom - 0.5, []int{4}},
		{"others idle", 0, []int{1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			close(g.release)
			clk := clock.New(time.Unix(1_700_000_000, 0))
			group := new(gatherGroup)
			b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second, Gather: 3 * time.Second,
				Group: group, Clock: clk})
			other := newBatcher(g.send, batchOptions{Group: group})
			group.update(other, tc.others)
			// Company rare: 0.75 calls expected in the window, and 0.5
			// or more in what is left of it at each arrival.
			setRate(b, 0.25)
			b.mu.Lock()
			b.avgReady = 1 // fewer than gatherFrom on its own
			b.mu.Unlock()
			var dones []chan error
			var got []int
			for i := range 4 {
				dones = append(dones, takeAsync(context.Background(), b, int64(i)))
				if len(tc.want) > 1 {
					got = append(got, sent(t, g))
					// Answered before the next arrives: its send is over.
					if err := <-dones[i]; err != nil {
						t.Fatal(err)
					}
					dones[i] <- nil
				} else {
					if i == 0 {
						clk.BlockUntil(t, 1)
					}
					waitQueued(t, b, i+1)
				}
				clk.Advance(50 * time.Millisecond)
			}
			if len(tc.want) == 1 {
				clk.Advance(3 * time.Second)
				got = append(got, sent(t, g))
			}
			for _, done := range dones {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if len(g.started) != 0 || !slices.Equal(got, tc.want) {
				t.Errorf("sends of %v ops (and %d more), want %v", got, len(g.started), tc.want)
			}
		})
	}
}

// TestCompanyRate: the rate counts the calls that arrive while a send is
// active, over the time sends are active, and none of the others.
func TestCompanyRate(t *testing.T) {
	var c company
	t0 := time.Unix(0, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// Sends active 1 ms of every 2, a call every 0.1 ms: 10 a ms while
	// active, the rest unseen.
	for ms := range 200 {
		start := at(time.Duration(ms) * 2 * time.Millisecond)
		c.add(1, start)
		for k := range 10 {
			c.arrive(start.Add(time.Duration(k)*100*time.Microsecond), false)
		}
		c.add(-1, start.Add(time.Millisecond))
		for k := range 10 {
			c.arrive(start.Add(time.Millisecond+time.Duration(k)*100*time.Microsecond), false)
		}
	}
	if r := c.all.rate; r < 9000 || r > 11000 {
		t.Errorf("rate %.0f, want about 10,000 a second (10 a ms while active)", r)
	}
	// Quiet: sends active, nobody arriving; the rate halves every 20 ms
	// of them.
	for ms := range 200 {
		start := at(time.Second + time.Duration(ms)*2*time.Millisecond)
		c.add(1, start)
		c.add(-1, start.Add(time.Millisecond))
	}
	if c.all.rate > 100 {
		t.Errorf("rate %.0f after 200 ms of active sends and no call, want below 100", c.all.rate)
	}
}

// TestCompanyComesLate: sends keep waiting where calls arrive all through
// their waits (an open loop), and stop where they all arrive early in
// them and none later (a few closed-loop callers, answered together),
// but for one in probeEvery.
func TestCompanyComesLate(t *testing.T) {
	const wait = time.Millisecond
	for _, tc := range []struct {
		name    string
		arrival func(k int) time.Duration // of the k-th of 3 calls in a wait
		waits   int                       // of 64 sends
	}{
		{"open loop", func(k int) time.Duration { return time.Duration(k+1) * wait / 4 }, 64},
		{"four callers in a closed loop", func(k int) time.Duration { return time.Duration(k+1) * 10 * time.Microsecond }, 64 / probeEvery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c company
			now := time.Unix(0, 0)
			round := func() {
				c.add(1, now)
				c.lateAt = now.Add(wait / 2)
				for k := range 3 {
					c.arrive(now.Add(tc.arrival(k)), true)
				}
				now = now.Add(wait)
				c.waited(now)
				now = now.Add(300 * time.Microsecond) // the send
				c.add(-1, now)
				now = now.Add(100 * time.Microsecond) // the callers' turn
			}
			for range 100 { // what the estimates learn from
				round()
			}
			waits := 0
			for range 64 {
				if c.worth(wait) {
					waits++
				}
			}
			if waits != tc.waits {
				t.Errorf("%d of 64 sends wait (all %.0f/s, late %.0f/s), want %d", waits, c.all.rate, c.late.rate, tc.waits)
			}
		})
	}
}

// TestBatcherFailsEveryMember: a failed send fails every call in it, and
// nothing is sent again.
func TestBatcherFailsEveryMember(t *testing.T) {
	g := newGate()
	g.err = errors.New("boom")
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.take(context.Background(), op(int64(i)), make([]limiter.Result, 1))
		}()
	}
	go func() {
		for range g.started {
			g.release <- struct{}{}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil || err.Error() != "boom" {
			t.Errorf("member of a failed send = %v, want its error", err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	sent := 0
	for _, s := range g.sends {
		sent += len(s)
	}
	if sent != 8 {
		t.Errorf("%d ops sent for 8 calls: something was sent twice or not at all", sent)
	}
}

// TestBatcherClose fails waiting calls and every later one.
func TestBatcherClose(t *testing.T) {
	g := newGate()
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second})
	go func() { _ = b.take(context.Background(), op(1), make([]limiter.Result, 1)) }()
	<-g.started
	done := make(chan error, 1)
	go func() { done <- b.take(context.Background(), op(2), make([]limiter.Result, 1)) }()
	waitQueued(t, b, 1)
	b.close()
	if err := <-done; !errors.Is(err, limiter.ErrUnavailable) {
		t.Errorf("waiting call at close = %v, want ErrUnavailable", err)
	}
	if err := b.take(context.Background(), op(3), make([]limiter.Result, 1)); !errors.Is(err, limiter.ErrUnavailable) {
		t.Errorf("call after close = %v, want ErrUnavailable", err)
	}
	close(g.release)
}

func waitQueued(t *testing.T, b *batcher, n int) {
	t.Helper()
	var q int
	if !wait.True(5*time.Second, func() bool { b.mu.Lock(); q = len(b.queue); b.mu.Unlock(); return q >= n }) {
		t.Fatalf("%d calls queued, want %d", q, n)
	}
}

func waitIdle(t *testing.T, b *batcher) {
	t.Helper()
	if !wait.True(5*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.busy == 0 }) {
		t.Fatalf("batcher still busy")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.active != 0 {
		t.Fatalf("idle batcher has %d sends active", b.active)
	}
}
