package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

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

// TestBatcherGathers: once sends are due with several calls waiting, a
// send waits Gather for more; a lone caller's sends never wait.
func TestBatcherGathers(t *testing.T) {
	g := newGate()
	close(g.release)
	b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second, Gather: 3 * time.Second})
	ctx := context.Background()
	start := time.Now()
	for i := range 5 {
		if err := b.take(ctx, op(int64(i)), make([]limiter.Result, 1)); err != nil {
			t.Fatal(err)
		}
		if n := <-g.started; n != 1 {
			t.Fatalf("lone call %d went in a send of %d ops", i, n)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("5 lone calls took %v: a lone caller waited to gather", took)
	}
	// Sends due with several calls waiting make the next gather.
	b.mu.Lock()
	b.avgReady = 2 * gatherFrom
	b.mu.Unlock()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.take(ctx, op(int64(10+i)), make([]limiter.Result, 1)); err != nil {
				t.Error(err)
			}
		}()
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	if n := <-g.started; n != 4 {
		t.Errorf("calls arriving 50 ms apart while gathering went in a send of %d ops, want all 4", n)
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
			group := new(gatherGroup)
			b := newBatcher(g.send, batchOptions{Slots: 1, MaxOps: 1000, Timeout: time.Second, Gather: 3 * time.Second,
				Group: group})
			other := newBatcher(g.send, batchOptions{Group: group})
			group.update(other, tc.others)
			b.mu.Lock()
			b.avgReady = 1 // fewer than gatherFrom on its own
			b.mu.Unlock()
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					if err := b.take(context.Background(), op(int64(i)), make([]limiter.Result, 1)); err != nil {
						t.Error(err)
					}
				})
				time.Sleep(50 * time.Millisecond)
			}
			wg.Wait()
			var got []int
			for range len(tc.want) {
				got = append(got, <-g.started)
			}
			if len(g.started) != 0 || !slices.Equal(got, tc.want) {
				t.Errorf("sends of %v ops (and %d more), want %v", got, len(g.started), tc.want)
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
}
