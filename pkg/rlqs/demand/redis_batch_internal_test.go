package demand

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// gate is a go-redis hook that counts the pipelines of script calls and
// holds the first pipelinesInFlight until opened.
type gate struct {
	pipelines atomic.Int32
	entered   chan struct{}
	open      chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, pipelinesInFlight), open: make(chan struct{})}
}

func (*gate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "evalsha" { // a connection's handshake
			return next(ctx, cmds)
		}
		if g.pipelines.Add(1) <= pipelinesInFlight {
			g.entered <- struct{}{}
			<-g.open
		}
		return next(ctx, cmds)
	}
}

// fill sends pipelinesInFlight exchanges of one write each to keys of
// their own, and returns once their pipelines are held, with a channel
// of their errors.
func (g *gate) fill(ctx context.Context, d *Redis, prefix string) <-chan error {
	errs := make(chan error, pipelinesInFlight)
	for i := range pipelinesInFlight {
		go func() {
			_, err := d.Exchange(ctx, []quota.Item{{Key: fmt.Sprintf("%s:{d/held=%d}:default:rlqs", prefix, i), Op: quota.Write,
				Demand: quota.Demand{Replica: "r", Client: "held", Rate: 1}}}, time.Minute, time.Time{})
			errs <- err
		}()
	}
	for range pipelinesInFlight {
		<-g.entered
	}
	return errs
}

// drained waits for fill's exchanges.
func drained(t *testing.T, errs <-chan error) {
	t.Helper()
	for range pipelinesInFlight {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func (d *Redis) queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// gated is a demand store whose first pipeline holds, a key prefix of
// its own, and the test Redis's client.
func gated(t *testing.T) (*Redis, *gate, *redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), DB: 11})
	prefix := fmt.Sprintf("demandbatch%d", time.Now().UnixNano())
	t.Cleanup(func() {
		redistest.DeleteKeys(t, rdb, prefix)
		_ = rdb.Close()
	})
	if err := demandScript.Load(context.Background(), rdb).Err(); err != nil { // no NOSCRIPT resend to count
		t.Fatal(err)
	}
	g := newGate()
	rdb.AddHook(g)
	return NewRedis(rdb), g, rdb, prefix
}

// TestRedisDemandSharesPipelines: the exchanges that come while a
// pipeline is in flight go in the next one, together, each answered with
// its own items' replies, the items of each (ttl, now) stamped with
// theirs.
func TestRedisDemandSharesPipelines(t *testing.T) {
	d, g, rdb, prefix := gated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := func(i int) string { return fmt.Sprintf("%s:{d/n=%d}:default:rlqs", prefix, i) }
	t0 := time.Unix(1_900_000_000, 0)

	held := g.fill(ctx, d, prefix)

	// Ten exchanges while the pipelines are held: each writes its client into key(i)
	// and into key(100), and reads both; even ones at t0 for a minute,
	// odd ones a second later for two.
	const n = 10
	type answer struct {
		got [][]quota.Demand
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		ttl, now := time.Minute, t0
		if i%2 == 1 {
			ttl, now = 2*time.Minute, t0.Add(time.Second)
		}
		d0 := quota.Demand{Replica: "r", Client: "c" + strconv.Itoa(i), Rate: float64(i)}
		items := []quota.Item{
			{Key: key(i), Op: quota.Write | quota.Read, Demand: d0},
			{Key: key(100), Op: quota.Write, Demand: d0},
		}
		wg.Go(func() {
			got, err := d.Exchange(ctx, items, ttl, now)
			answers[i-1] = answer{got, err}
		})
	}
	wait.For(t, 20*time.Second, func() bool { return d.queued() == n })
	close(g.open)
	drained(t, held)
	wg.Wait()

	if p := g.pipelines.Load(); p != pipelinesInFlight+1 {
		t.Fatalf("%d pipelines, want %d: the held ones, then the ten exchanges together", p, pipelinesInFlight+1)
	}
	for i := 1; i <= n; i++ {
		a := answers[i-1]
		if a.err != nil {
			t.Fatalf("exchange %d: %v", i, a.err)
		}
		if len(a.got) != 2 || len(a.got[0]) != 1 || a.got[0][0].Client != "c"+strconv.Itoa(i) || a.got[0][0].Rate != float64(i) {
			t.Fatalf("exchange %d answered %v, want its own key's one value", i, a.got)
		}
		wantExpires := t0.Add(time.Minute).UnixMilli()
		if i%2 == 1 {
			wantExpires = t0.Add(time.Second + 2*time.Minute).UnixMilli()
		}
		v := rdb.HGet(ctx, key(i), "r/c"+strconv.Itoa(i)).Val()
		if exp, _, _ := strings.Cut(v, ":"); exp != strconv.FormatInt(wantExpires, 10) {
			t.Fatalf("key %d holds %q, want it to expire at %d (its exchange's now and ttl)", i, v, wantExpires)
		}
	}
	if fields := rdb.HLen(ctx, key(100)).Val(); fields != n {
		t.Fatalf("shared key holds %d clients, want %d", fields, n)
	}
}

// TestRedisDemandQueuedCancel: an exchange whose context ends while it
// waits for a pipeline returns at once with the context's error, and is
// never sent; the others are.
func TestRedisDemandQueuedCancel(t *testing.T) {
	d, g, rdb, prefix := gated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keyA, keyB := prefix+":{d/n=a}:default:rlqs", prefix+":{d/n=b}:default:rlqs"
	write := func(key string) []quota.Item {
		return []quota.Item{{Key: key, Op: quota.Write, Demand: quota.Demand{Replica: "r", Client: "c", Rate: 1}}}
	}
	held := g.fill(ctx, d, prefix)

	gone, stop := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() {
		_, err := d.Exchange(gone, write(keyA), time.Minute, time.Time{})
		cancelled <- err
	}()
	wait.For(t, 20*time.Second, func() bool { return d.queued() == 1 })
	stop()
	select {
	case err := <-cancelled:
		if !errors.Is(err, limiter.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled exchange: %v, want ErrUnavailable and context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a cancelled exchange waited for the pipeline ahead of it")
	}
	close(g.open)
	drained(t, held)
	// A later exchange goes in its own pipeline: the leads were handed on.
	if _, err := d.Exchange(ctx, write(keyB), time.Minute, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, keyA).Val(); n != 0 {
		t.Fatal("the cancelled exchange's item was sent")
	}
	if p := g.pipelines.Load(); p != pipelinesInFlight+1 {
		t.Fatalf("%d pipelines, want %d", p, pipelinesInFlight+1)
	}
}

// TestRedisDemandCancelsUnderLoad: exchanges whose contexts end at
// random points (queued, leading, in flight) never leave the queue
// without a leader, nor fail the exchanges beside them: every exchange
// not cancelled is answered.
func TestRedisDemandCancelsUnderLoad(t *testing.T) {
	d, g, _, prefix := gated(t)
	close(g.open)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16*50)
	for w := range 16 {
		wg.Go(func() {
			for i := range 50 {
				item := quota.Item{Key: fmt.Sprintf("%s:{d/n=%d}:default:rlqs", prefix, i%7), Op: quota.Write | quota.Read,
					Demand: quota.Demand{Replica: "r", Client: strconv.Itoa(w), Rate: 1}}
				c, stop := context.WithCancel(ctx)
				switch (w + i) % 3 {
				case 0: // ended before it comes
					stop()
				case 1: // ends at some point of its way
					go stop()
				}
				_, err := d.Exchange(c, []quota.Item{item}, time.Minute, time.Time{})
				if (w+i)%3 == 2 && err != nil {
					errs <- fmt.Errorf("exchange %d/%d, not cancelled: %w", w, i, err)
				}
				stop()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := d.Exchange(ctx, []quota.Item{{Key: prefix + ":{d/n=0}:default:rlqs", Op: quota.Read}}, time.Minute, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	queued, sending := len(d.queue), d.sending
	d.mu.Unlock()
	if queued != 0 || sending != 0 {
		t.Fatalf("%d exchanges left queued, %d leads held; want none", queued, sending)
	}
}

// TestRedisDemandWithdrawHandsOn: an exchange given a lead that leaves
// before it takes it (its context ended) hands the lead to the next one
// queued without one, or, the last, frees its place; a lead is never
// given twice to one exchange.
func TestRedisDemandWithdrawHandsOn(t *testing.T) {
	d := NewRedis(nil)
	x1 := &exchange{wake: make(chan struct{}, 1)}
	x2 := &exchange{wake: make(chan struct{}, 1)}
	d.queue, d.sending = []*exchange{x1, x2}, 2
	d.handOff()
	if !x1.lead || len(x1.wake) != 1 || d.sending != 2 {
		t.Fatal("the oldest queued was not given the finished lead")
	}
	d.handOff()
	if !x2.lead || len(x2.wake) != 1 || d.sending != 2 {
		t.Fatal("a second finished lead did not go to the next queued without one")
	}
	d.withdraw(x1)
	if x1.lead || d.sending != 1 || len(d.queue) != 1 {
		t.Fatalf("x1 left with its lead: sending %d, queue %d; want 1, 1 (none queued to take it)", d.sending, len(d.queue))
	}
	d.withdraw(x2)
	if d.sending != 0 || len(d.queue) != 0 {
		t.Fatalf("the last one left: sending %d, queue %d; want 0, 0", d.sending, len(d.queue))
	}
}
