package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// openLoop drives a batcher on a fake clock with calls arriving as a
// Poisson process (or from closed-loop callers, each calling again a
// while after its answer), each send taking rtt of the clock, step by
// step: every event (an arrival, a timer, a send's end) happens once the
// batcher has settled after the one before, so that the outcome depends
// on the batcher's rules alone, not on the machine.
type openLoop struct {
	t       *testing.T
	clk     *clock.Clock
	b       *batcher
	rtt     time.Duration
	started chan openSend // sends, as they start
	answers chan int      // calls answered, by number

	mu       sync.Mutex
	answered int                 // calls answered
	inSends  map[*openSend]int64 // sends under way: their ops
	left     []*openSend         // sends under way, by end
}

// loadShape is how calls arrive: at rate a second (Poisson), or from
// callers closed-loop callers, each calling again think after its answer.
type loadShape struct {
	rate    float64
	callers int
	think   time.Duration
}

type openSend struct {
	ops     []limiter.Op
	end     time.Time
	release chan struct{}
}

// openLoopResult is what a run measured: ops a send, and each call's wait
// from its arrival to its send's start.
type openLoopResult struct {
	perSend float64
	waits   []time.Duration // sorted
}

func (r openLoopResult) quantile(q float64) time.Duration {
	return r.waits[min(int(q*float64(len(r.waits))), len(r.waits)-1)]
}

func (r openLoopResult) mean() time.Duration {
	var sum time.Duration
	for _, w := range r.waits {
		sum += w
	}
	return sum / time.Duration(len(r.waits))
}

// runOpenLoop sends n calls shaped by load into a batcher of opts.
func runOpenLoop(t *testing.T, opts batchOptions, load loadShape, n int, rtt time.Duration) openLoopResult {
	o := &openLoop{t: t, clk: clock.New(time.Unix(1_700_000_000, 0)), rtt: rtt, started: make(chan openSend, 64), answers: make(chan int, n),
		inSends: map[*openSend]int64{}}
	opts.Clock = o.clk
	o.b = newBatcher(func(_ context.Context, ops []limiter.Op, results []limiter.Result) error {
		s := openSend{ops: slices.Clone(ops), release: make(chan struct{})}
		o.started <- s
		<-s.release
		return nil
	}, opts)
	defer o.b.close()
	rng := rand.New(rand.NewPCG(uint64(load.rate), 39))
	start := o.clk.Now()
	arrivals := make([]time.Time, n) // of the calls to come, by number
	pending := []int{}               // numbers of the calls to come, by arrival
	if load.callers > 0 {
		for i := range load.callers {
			arrivals[i] = start.Add(time.Duration(i) * time.Microsecond)
			pending = append(pending, i)
		}
	} else {
		at := start
		for i := range arrivals {
			at = at.Add(time.Duration(rng.ExpFloat64() / load.rate * float64(time.Second)))
			arrivals[i] = at
			pending = append(pending, i)
		}
	}
	made := len(pending) // calls given a number
	sendStart := make([]time.Time, n)
	sends, ops := 0, 0
	for arrived := 0; arrived < n || o.unanswered(n); {
		// The next event: an arrival, the gather timer, or a send's end.
		when := time.Time{}
		if len(pending) > 0 {
			when = arrivals[pending[0]]
		}
		now := o.clk.Now()
		if p := o.clk.Pending(); len(p) > 0 && (when.IsZero() || now.Add(p[0]).Before(when)) {
			when = now.Add(p[0])
		}
		o.mu.Lock()
		var ending *openSend
		if len(o.left) > 0 && (when.IsZero() || !o.left[0].end.After(when)) {
			ending, o.left = o.left[0], o.left[1:]
			when = ending.end
		}
		o.mu.Unlock()
		if when.IsZero() {
			t.Fatal("nothing left to happen, but calls wait")
		}
		o.clk.Advance(when.Sub(now))
		switch {
		case ending != nil:
			o.mu.Lock()
			delete(o.inSends, ending)
			o.mu.Unlock()
			close(ending.release)
		case len(pending) > 0 && when.Equal(arrivals[pending[0]]):
			i := pending[0]
			pending = pending[1:]
			arrived++
			go func() {
				if err := o.b.take(context.Background(), []limiter.Op{{Key: "k", Cost: int64(i)}}, make([]limiter.Result, 1)); err != nil {
					t.Error(err)
				}
				o.answers <- i
			}()
		}
		// Settle: the batcher's goroutines all wait on something.
		for !o.settled(arrived) {
			select {
			case <-o.answers:
				o.mu.Lock()
				o.answered++
				o.mu.Unlock()
				if load.callers > 0 && made < n { // the caller calls again
					arrivals[made] = o.clk.Now().Add(load.think)
					pending = append(pending, made)
					slices.SortStableFunc(pending, func(a, b int) int { return arrivals[a].Compare(arrivals[b]) })
					made++
				}
			case s := <-o.started:
				s.end = o.clk.Now().Add(o.rtt)
				o.mu.Lock()
				o.inSends[&s] = int64(len(s.ops))
				o.left = append(o.left, &s)
				slices.SortStableFunc(o.left, func(a, b *openSend) int { return a.end.Compare(b.end) })
				o.mu.Unlock()
				sends++
				ops += len(s.ops)
				for _, op := range s.ops {
					sendStart[op.Cost] = o.clk.Now()
				}
			default:
				runtime.Gosched()
			}
		}
	}
	res := openLoopResult{perSend: float64(ops) / float64(sends)}
	for i := range n {
		res.waits = append(res.waits, sendStart[i].Sub(arrivals[i]))
	}
	slices.Sort(res.waits)
	return res
}

// unanswered reports whether calls of n are unanswered.
func (o *openLoop) unanswered(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.answered < n
}

// settled reports whether every call of the arrived is queued, in a send
// under way or answered, and every slot held gathers (on a timer) or
// sends.
func (o *openLoop) settled(arrived int) bool {
	o.mu.Lock()
	inSends, sending := int64(0), len(o.inSends)
	for _, n := range o.inSends {
		inSends += n
	}
	answered := o.answered
	o.mu.Unlock()
	timers := len(o.clk.Pending())
	b := o.b
	b.mu.Lock()
	defer b.mu.Unlock()
	gathering := 0
	if b.gathering {
		gathering = 1
	}
	return len(o.started) == 0 && len(o.answers) == 0 && !b.kicked && int64(arrived) == int64(len(b.queue))+inSends+int64(answered) &&
		b.busy == gathering+sending && timers == gathering
}

// TestGatherOpenLoop runs the batcher's defaults (two slots, a window of
// 1 ms) under open loops of 500 to 10,000 calls a second, sends taking
// 0.2 ms: calls carry about 1 + rate x window decisions where a window is
// expected to bring one or more, none below, and no call waits for its
// send past the window and a send's time. Closed loops of 1 and 4
// callers, each calling again 0.1 ms after its answer, wait for nothing
// but their probes. docs/redis.md's table of what the window adds is this
// test's log (go test -run TestGatherOpenLoop -v ./pkg/store), with
// windows of 0.5 and 2 ms for comparison.
func TestGatherOpenLoop(t *testing.T) {
	const rtt = 200 * time.Microsecond
	t.Logf("| load | window | decisions a call | added latency: mean | p50 | p99 | max |")
	for _, tc := range []struct {
		load     loadShape
		window   time.Duration
		min, max float64 // decisions a send; 0: not checked
	}{
		{loadShape{rate: 500}, time.Millisecond, 1, 1.1},  // 0.5 expected in a window: no wait
		{loadShape{rate: 1000}, time.Millisecond, 1, 2.1}, // 1 expected: on the edge
		{loadShape{rate: 2000}, time.Millisecond, 2.5, 3.1},
		{loadShape{rate: 5000}, time.Millisecond, 5.2, 6.2},
		{loadShape{rate: 10000}, time.Millisecond, 9.5, 11.5},
		{loadShape{rate: 2000}, time.Millisecond / 2, 0, 0},
		{loadShape{rate: 5000}, time.Millisecond / 2, 0, 0},
		{loadShape{rate: 2000}, 2 * time.Millisecond, 0, 0},
		{loadShape{rate: 5000}, 2 * time.Millisecond, 0, 0},
		{loadShape{callers: 1, think: 100 * time.Microsecond}, time.Millisecond, 1, 1},
		{loadShape{callers: 4, think: 100 * time.Microsecond}, time.Millisecond, 1, 1.5},
	} {
		r := runOpenLoop(t, batchOptions{Slots: 2, MaxOps: 1020, Timeout: time.Second, Gather: tc.window, GatherOps: 255},
			tc.load, 3000, rtt)
		ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1e3) }
		what := fmt.Sprintf("%.0f a second", tc.load.rate)
		if tc.load.callers > 0 {
			what = fmt.Sprintf("%d closed-loop callers", tc.load.callers)
		}
		t.Logf("| %s | %v | %.1f | %s | %s | %s | %s |", what, tc.window, r.perSend, ms(r.mean()), ms(r.quantile(0.5)),
			ms(r.quantile(0.99)), ms(r.waits[len(r.waits)-1]))
		if tc.max > 0 && (r.perSend < tc.min || r.perSend > tc.max) {
			t.Errorf("%s: %.2f decisions a send, want %.1f to %.1f", what, r.perSend, tc.min, tc.max)
		}
		if most := r.waits[len(r.waits)-1]; most > tc.window+2*rtt {
			t.Errorf("%s: a call waited %v for its send, want at most the window and two sends", what, most)
		}
	}
}
