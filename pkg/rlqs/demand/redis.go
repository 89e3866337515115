package demand

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// ErrBadItem marks an exchange item the demand store cannot encode: a
// replica or client name that is empty or holds '/', an op that both
// writes and deletes, or a reserve that also reads.
var ErrBadItem = errors.New("bad demand item")

// demandKeysPerCall bounds the keys of one demand.lua call, so that a
// script does not hold Redis for long; an exchange's calls share a pipeline.
const demandKeysPerCall = 128

var demandScript = redis.NewScript(lua.Demand)

// Redis shares the demand of RLQS clients among replicas through Redis,
// a hash per bucket whose fields are the clients (lua/demand.lua), in one
// pipeline an exchange (docs/rlqs.md, "Across replicas"). It is safe for
// concurrent use.
type Redis struct {
	client redis.UniversalClient

	mu      sync.Mutex
	expired []quota.Item // deletes for the next pipeline
	queue   []*exchange  // exchanges waiting for a pipeline, oldest first
	sending int          // pipelines being sent or led (redis_batch.go)
}

// maxExpired bounds the deletes of expired values waiting for an
// exchange; past it, values wait for a later read to be met again.
const maxExpired = 4096

// NewRedis returns a demand store on client, which may be a
// single-node, Sentinel or Cluster client; it does no I/O.
func NewRedis(client redis.UniversalClient) *Redis {
	return &Redis{client: client}
}

// Exchange is rlqs.DemandStore's; now stamps and judges values (zero:
// Redis TIME). The exchanges that come while a pipeline is in flight go
// to Redis together in the next one (redis_batch.go). An error wraps
// limiter.ErrUnavailable, or ErrBadItem for items that cannot be
// encoded, which are refused unsent.
func (d *Redis) Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	if err := checkDemand(items); err != nil || len(items) == 0 {
		return nil, err
	}
	return d.await(ctx, &exchange{ctx: ctx, items: items, ttl: ttl, now: now, wake: make(chan struct{}, 1)})
}

func checkDemand(items []quota.Item) error {
	for i := range items {
		it := &items[i]
		d := it.Demand
		switch {
		case it.Op&(quota.Write|quota.Reserve) != 0 && it.Op&(quota.Delete|quota.DeleteExpired) != 0:
			return fmt.Errorf("%w: item %d both writes and deletes", ErrBadItem, i)
		case it.Op&quota.Reserve != 0 && it.Op&(quota.Write|quota.Read) != 0:
			return fmt.Errorf("%w: item %d reserves and writes or reads", ErrBadItem, i)
		case it.Op&(quota.Write|quota.Delete|quota.DeleteExpired|quota.Reserve) != 0 && (d.Replica == "" || d.Client == "" ||
			strings.ContainsRune(d.Replica, '/') || strings.ContainsRune(d.Client, '/')):
			return fmt.Errorf("%w: item %d: replica %q, client %q", ErrBadItem, i, d.Replica, d.Client)
		}
	}
	return nil
}

// demandCalls splits items into script calls, as index ranges of a
// permutation: one slot per call on a Cluster.
func demandCalls(items []quota.Item, c redis.UniversalClient) [][]int {
	var calls [][]int
	if _, ok := c.(*redis.ClusterClient); !ok {
		for i := 0; i < len(items); i += demandKeysPerCall {
			call := make([]int, 0, min(demandKeysPerCall, len(items)-i))
			for j := i; j < min(i+demandKeysPerCall, len(items)); j++ {
				call = append(call, j)
			}
			calls = append(calls, call)
		}
		return calls
	}
	bySlot := map[int]int{} // slot -> index in calls of its open call
	for i := range items {
		s := store.Slot(items[i].Key)
		k, ok := bySlot[s]
		if !ok || len(calls[k]) == demandKeysPerCall {
			k = len(calls)
			calls = append(calls, nil)
			bySlot[s] = k
		}
		calls[k] = append(calls[k], i)
	}
	return calls
}

// script queues a segment's script calls on pipe.
func (g *segment) script(ctx context.Context, pipe redis.Pipeliner) {
	var nowMs int64
	if !g.now.IsZero() {
		nowMs = g.now.UnixMilli()
	}
	g.cmds = make([]*redis.Cmd, len(g.calls))
	for k, call := range g.calls {
		keys := make([]string, len(call))
		args := make([]any, 0, 2+7*len(call))
		args = append(args, nowMs, max(g.ttl.Milliseconds(), 1))
		for j, i := range call {
			it := &g.items[i]
			keys[j] = it.Key
			args = append(args, int(it.Op), it.Demand.Replica+"/"+it.Demand.Client, rateMilli(it.Demand.Rate),
				heldMilli(it.Demand.Assigned), heldMilli(it.Cap), heldMilli(it.Adopt), it.Fresh.Milliseconds())
		}
		g.cmds[k] = demandScript.EvalSha(ctx, pipe, keys, args...)
	}
}

// decode returns, from the replies of a segment's calls, each read's
// live demand and each reserve's grant, and appends the deletes of the
// expired values they met to expired.
func (g *segment) decode(expired []quota.Item) ([][]quota.Demand, []quota.Item, error) {
	items := g.items
	out := make([][]quota.Demand, len(items))
	for k, call := range g.calls {
		reply, err := g.cmds[k].Slice()
		if err != nil {
			return nil, nil, err
		}
		clock, _ := reply[0].(int64)
		if len(reply) != len(call)+1 || clock <= 0 {
			return nil, nil, fmt.Errorf("demand.lua replied %d elements for %d keys", len(reply), len(call))
		}
		for j, i := range call {
			if items[i].Op&quota.Reserve != 0 {
				r, _ := reply[j+1].([]any)
				if len(r) != 2 {
					return nil, nil, fmt.Errorf("demand.lua: bad reserve reply %v", reply[j+1])
				}
				granted, _ := r[0].(int64)
				adopted, _ := r[1].(int64)
				d := items[i].Demand
				d.Rate, d.Assigned, d.Adopted = fromRate(rateMilli(d.Rate)), float64(granted)/1000, float64(adopted)/1000
				out[i] = []quota.Demand{d}
				continue
			}
			if items[i].Op&quota.Read == 0 {
				continue
			}
			staleBefore := int64(math.MinInt64)
			if f := items[i].Fresh; f > 0 {
				staleBefore = clock + g.ttl.Milliseconds() - f.Milliseconds()
			}
			if out[i], expired, err = decodeDemand(items[i].Key, reply[j+1], clock, staleBefore, expired); err != nil {
				return nil, nil, err
			}
		}
	}
	return out, expired, nil
}

// maxMilli bounds the milli-rates sent, so that Lua prints them as integers.
const maxMilli = 1e14

// rateMilli is a rate in milli-requests per second, -1 for an unknown
// one, -2 for quota.Left.
func rateMilli(rate float64) int64 {
	switch {
	case rate == quota.Left:
		return -2
	case rate < 0 || math.IsNaN(rate):
		return -1
	}
	return int64(math.Min(rate*1000, maxMilli))
}

// heldMilli is a held rate in milli-requests per second, 0 if not positive.
func heldMilli(held float64) int64 {
	if !(held > 0) {
		return 0
	}
	return int64(math.Min(math.Ceil(held*1000), maxMilli))
}

// decodeDemand decodes one key's HGETALL, {field, "expires:rate:held",
// ...}: the values that have not expired at now (Unix ms), as quota.Left
// those expiring before staleBefore, and deletes of those that have
// expired (quota.DeleteExpired), appended to expired.
func decodeDemand(key string, v any, now, staleBefore int64, expired []quota.Item) ([]quota.Demand, []quota.Item, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, nil, fmt.Errorf("demand.lua: bad reply %T", v)
	}
	ds := make([]quota.Demand, 0, len(flat)/2)
	for j := 0; j < len(flat); j += 2 {
		field, _ := flat[j].(string)
		value, _ := flat[j+1].(string)
		replica, client, ok := strings.Cut(field, "/")
		exp, rest, ok2 := strings.Cut(value, ":")
		rate, held, _ := strings.Cut(rest, ":")
		expires, err1 := strconv.ParseInt(exp, 10, 64)
		milli, err2 := strconv.ParseInt(rate, 10, 64)
		var heldM int64
		var err3 error
		if held != "" {
			heldM, err3 = strconv.ParseInt(held, 10, 64)
		}
		if !ok || !ok2 || err1 != nil || err2 != nil || err3 != nil {
			return nil, nil, fmt.Errorf("demand.lua: bad field %q = %q", field, value)
		}
		d := quota.Demand{Replica: replica, Client: client, Rate: fromRate(milli), Assigned: float64(heldM) / 1000}
		if expires < now {
			expired = append(expired, quota.Item{Key: key, Demand: d, Op: quota.DeleteExpired})
			continue
		}
		if expires < staleBefore {
			d.Rate = quota.Left
		}
		ds = append(ds, d)
	}
	return ds, expired, nil
}

// fromRate is a rate of rateMilli's in requests per second.
func fromRate(m int64) float64 {
	switch {
	case m == -2:
		return quota.Left
	case m < 0:
		return -1
	}
	return float64(m) / 1000
}

// freedChannel is the Redis channel on which replicas announce rates
// they freed, "<replica>\x00<key>" a message.
const freedChannel = "fastlimit:rlqs:freed"

// Notify is rlqs.Notifier's: a PUBLISH a key, in one pipeline.
func (d *Redis) Notify(ctx context.Context, from string, keys []string) error {
	pipe := d.client.Pipeline()
	for _, k := range keys {
		pipe.Publish(ctx, freedChannel, from+"\x00"+k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redis demand notify: %w: %w", limiter.ErrUnavailable, err)
	}
	return nil
}

// Watch is rlqs.Notifier's: it subscribes to the channel, resubscribing
// after a lost connection as go-redis does, until ctx ends.
func (d *Redis) Watch(ctx context.Context, f func(from, key string)) error {
	ps := d.client.Subscribe(ctx, freedChannel)
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			if from, key, ok := strings.Cut(m.Payload, "\x00"); ok {
				f(from, key)
			}
		}
	}
}
