package demand

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// Concurrent exchanges share pipelines. An exchange joins Redis's queue;
// if fewer than pipelinesInFlight pipelines are being sent, its caller
// leads: it takes the queue (up to batchItems items) and sends it as one
// pipeline, the items of the exchanges with one (ttl, now) sharing
// script calls. When the replies are in, each exchange taken is done,
// and the lead passes to the oldest exchange still queued, which takes
// all that queued meanwhile. Under load a pipeline carries the exchanges
// that came while the others were in flight, so that the round trips,
// script calls and Redis's reads and writes per exchange fall as
// exchanges come faster; alone an exchange goes at once.

// pipelinesInFlight bounds the pipelines one store has in flight at once:
// enough that a slow round trip does not hold every exchange behind it.
const pipelinesInFlight = 4

// batchItems bounds the items of one pipeline, beyond its first
// exchange's.
const batchItems = 8192

// exchange is one Exchange call: waiting in the queue, in a pipeline, or
// done. lead, done, out and err are guarded by Redis.mu.
type exchange struct {
	ctx   context.Context
	items []quota.Item
	ttl   time.Duration
	now   time.Time
	wake  chan struct{} // signalled when it is to lead, or done

	lead, done bool
	out        [][]quota.Demand
	err        error
}

// segment is the part of a pipeline of one (ttl, now): its exchanges'
// items, then, in the first, the deletes of expired values.
type segment struct {
	ttl   time.Duration
	now   time.Time
	items []quota.Item
	calls [][]int // demandCalls'
	cmds  []*redis.Cmd
}

// await queues x and returns its answer: led by its own caller or by
// another's. If ctx ends first, x leaves the queue, or, in flight, is
// left to its pipeline, and the error is ctx's.
func (d *Redis) await(ctx context.Context, x *exchange) ([][]quota.Demand, error) {
	d.mu.Lock()
	d.queue = append(d.queue, x)
	if d.sending < pipelinesInFlight {
		d.sending++
		x.lead = true
	}
	for {
		if x.lead { // before done: a lead taken is never dropped
			x.lead = false
			d.mu.Unlock()
			d.send()
			d.mu.Lock()
			continue
		}
		if x.done {
			d.mu.Unlock()
			return x.out, x.err
		}
		d.mu.Unlock()
		select {
		case <-x.wake:
			d.mu.Lock()
		case <-ctx.Done():
			d.mu.Lock()
			d.withdraw(x)
			if x.done {
				d.mu.Unlock()
				return x.out, x.err
			}
			d.mu.Unlock()
			return nil, unavailable(context.Cause(ctx))
		}
	}
}

// withdraw takes x out of the queue if it is there (not yet sent), and
// hands the lead on if it was given one; d.mu is held.
func (d *Redis) withdraw(x *exchange) {
	if i := slices.Index(d.queue, x); i >= 0 {
		d.queue = slices.Delete(d.queue, i, i+1)
	}
	if x.lead {
		x.lead = false
		d.handOff()
	}
}

// handOff gives a finished lead to the oldest exchange queued without
// one, or, none queued, frees its place among the pipelines in flight; d.mu is held.
func (d *Redis) handOff() {
	for _, x := range d.queue {
		if !x.lead {
			x.lead = true
			signal(x.wake)
			return
		}
	}
	d.sending--
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// send takes the queue's oldest exchanges, up to batchItems items, with
// the deletes of expired values waiting, sends them in one pipeline,
// answers them and hands the lead on. Another leader may have taken the
// queue, the leader's own exchange with it: then it has nothing to send.
func (d *Redis) send() {
	d.mu.Lock()
	if len(d.queue) == 0 {
		d.handOff()
		d.mu.Unlock()
		return
	}
	n, size := 0, 0
	for n < len(d.queue) && (n == 0 || size+len(d.queue[n].items) <= batchItems) {
		size += len(d.queue[n].items)
		n++
	}
	batch := slices.Clone(d.queue[:n])
	d.queue = slices.Delete(d.queue, 0, n)
	expired := d.expired
	d.expired = nil
	d.mu.Unlock()

	segs, at := segments(batch, expired)
	err := d.pipeline(batch, segs)
	retry := expired // on an error, not deleted: tried again
	outs := make([][][]quota.Demand, len(segs))
	if err == nil {
		retry = nil
		for k := range segs {
			if outs[k], retry, err = segs[k].decode(retry); err != nil {
				retry = expired
				break
			}
		}
	}
	if err != nil {
		err = unavailable(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expired = append(d.expired, retry[:min(len(retry), maxExpired-len(d.expired))]...)
	for i, x := range batch {
		x.done, x.err = true, err
		if err == nil {
			k, off := at[i][0], at[i][1]
			x.out = outs[k][off : off+len(x.items)]
		}
		signal(x.wake)
	}
	d.handOff()
}

// segments groups the batch's items by (ttl, now), in order, the expired
// deletes in the first; at[i] is exchange i's segment and offset there.
func segments(batch []*exchange, expired []quota.Item) ([]segment, [][2]int) {
	if len(batch) == 1 && len(expired) == 0 { // alone: its items as they are
		x := batch[0]
		return []segment{{ttl: x.ttl, now: x.now, items: x.items}}, [][2]int{{0, 0}}
	}
	var segs []segment
	at := make([][2]int, len(batch))
	for i, x := range batch {
		k := slices.IndexFunc(segs, func(g segment) bool { return g.ttl == x.ttl && g.now.Equal(x.now) })
		if k < 0 {
			k = len(segs)
			segs = append(segs, segment{ttl: x.ttl, now: x.now})
		}
		at[i] = [2]int{k, len(segs[k].items)}
		segs[k].items = append(segs[k].items, x.items...)
	}
	segs[0].items = append(segs[0].items, expired...)
	return segs, at
}

// pipeline sends the segments' script calls in one pipeline, loading the
// script and sending again once on NOSCRIPT. Its context lasts as long
// as the batch's longest deadline, whichever caller leads (none: the
// client's own timeouts bound it).
func (d *Redis) pipeline(batch []*exchange, segs []segment) error {
	ctx, cancel := batchContext(batch)
	defer cancel()
	for k := range segs {
		segs[k].calls = demandCalls(segs[k].items, d.client)
	}
	exec := func() error {
		pipe := d.client.Pipeline()
		for k := range segs {
			segs[k].script(ctx, pipe)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := exec()
	if store.IsNoScript(err) {
		if err = demandScript.Load(ctx, d.client).Err(); err == nil {
			err = exec()
		}
	}
	return err
}

// unavailable is an exchange's error: err, wrapping limiter.ErrUnavailable.
func unavailable(err error) error {
	return fmt.Errorf("redis demand exchange: %w: %w", limiter.ErrUnavailable, err)
}

// batchContext is the context of a batch's pipeline: the leader's values,
// cancelled by none of its callers, with the latest of their deadlines.
func batchContext(batch []*exchange) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, x := range batch {
		dl, ok := x.ctx.Deadline()
		if !ok {
			return base, func() {}
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(base, latest)
}
