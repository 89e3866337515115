package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// ErrBadDemand marks an exchange item the demand store cannot encode: a
// replica or client name that is empty or holds '/', or an op that both
// writes and deletes.
var ErrBadDemand = errors.New("bad demand item")

// demandKeysPerCall bounds the keys of one demand.lua call, so that Redis,
// which runs a script to its end before serving anyone else, is not held
// for long; the calls of one exchange still leave in one pipeline.
const demandKeysPerCall = 128

var demandScript = redis.NewScript(lua.Demand)

// RedisDemand shares the demand of RLQS clients among FastLimit replicas
// through Redis: each bucket is a hash of the project's key scheme whose
// fields are the clients, written and read back by lua/demand.lua. An
// exchange is one round trip: its script calls (one per 128 keys, and on
// a Cluster one per slot) leave in one pipeline. Writes are idempotent, so
// that a pipeline refused with NOSCRIPT is sent again after loading the
// script. It is safe for concurrent use.
type RedisDemand struct {
	client redis.UniversalClient
}

// NewRedisDemand returns a demand store on client, which may be a
// single-node, Sentinel or Cluster client; it does no I/O.
func NewRedisDemand(client redis.UniversalClient) *RedisDemand {
	return &RedisDemand{client: client}
}

// DemandOf returns a demand store on the client of a Redis store, which
// keeps owning it: the demand store must not be used after r is closed.
func DemandOf(r *Redis) *RedisDemand {
	return &RedisDemand{client: r.client}
}

// Exchange writes or deletes each item's client in its bucket, every
// value living ttl, and returns, for each item with quota.Read, every
// live demand of its bucket (after this exchange's writes), nil for the
// others. now is the time values are stamped and judged at; zero means
// Redis TIME. An error wraps limiter.ErrUnavailable, except for items
// that cannot be encoded (ErrBadDemand), which are refused unsent.
func (d *RedisDemand) Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	if err := checkDemand(items); err != nil || len(items) == 0 {
		return nil, err
	}
	calls := demandCalls(items, d.client)
	out, err := d.send(ctx, items, calls, ttl, now)
	if err != nil && isNoScript(err) {
		if err = demandScript.Load(ctx, d.client).Err(); err == nil {
			out, err = d.send(ctx, items, calls, ttl, now)
		}
	}
	if err != nil {
		return nil, unavailable("demand exchange", err)
	}
	return out, nil
}

func checkDemand(items []quota.Item) error {
	for i := range items {
		it := &items[i]
		d := it.Demand
		switch {
		case it.Op&quota.Write != 0 && it.Op&quota.Delete != 0:
			return fmt.Errorf("%w: item %d both writes and deletes", ErrBadDemand, i)
		case it.Op&(quota.Write|quota.Delete) != 0 && (d.Replica == "" || d.Client == "" ||
			strings.ContainsRune(d.Replica, '/') || strings.ContainsRune(d.Client, '/')):
			return fmt.Errorf("%w: item %d: replica %q, client %q", ErrBadDemand, i, d.Replica, d.Client)
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
		s := slotOf(items[i].Key)
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

func (d *RedisDemand) send(ctx context.Context, items []quota.Item, calls [][]int, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	var nowMs int64
	if !now.IsZero() {
		nowMs = now.UnixMilli()
	}
	pipe := d.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for k, call := range calls {
		keys := make([]string, len(call))
		args := make([]any, 0, 2+3*len(call))
		args = append(args, nowMs, max(ttl.Milliseconds(), 1))
		for j, i := range call {
			it := &items[i]
			keys[j] = it.Key
			args = append(args, int(it.Op), it.Demand.Replica+"/"+it.Demand.Client, rateMilli(it.Demand.Rate))
		}
		cmds[k] = demandScript.EvalSha(ctx, pipe, keys, args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([][]quota.Demand, len(items))
	for k, call := range calls {
		reply, err := cmds[k].Slice()
		if err != nil {
			return nil, err
		}
		if len(reply) != len(call)+1 {
			return nil, fmt.Errorf("demand.lua replied %d elements for %d keys", len(reply), len(call))
		}
		for j, i := range call {
			if items[i].Op&quota.Read == 0 {
				continue
			}
			if out[i], err = decodeDemand(reply[j+1]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// rateMilli is a rate in milli-requests per second, -1 for an unknown one.
func rateMilli(rate float64) int64 {
	if rate < 0 || math.IsNaN(rate) {
		return -1
	}
	return int64(math.Min(rate*1000, 1<<53))
}

// decodeDemand decodes one key's {field, rate, ...}.
func decodeDemand(v any) ([]quota.Demand, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, fmt.Errorf("demand.lua: bad reply %T", v)
	}
	ds := make([]quota.Demand, 0, len(flat)/2)
	for j := 0; j < len(flat); j += 2 {
		field, _ := flat[j].(string)
		rate, _ := flat[j+1].(string)
		replica, client, ok := strings.Cut(field, "/")
		milli, err := strconv.ParseInt(rate, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("demand.lua: bad field %q = %q", field, rate)
		}
		ds = append(ds, quota.Demand{Replica: replica, Client: client, Rate: fromMilli(milli)})
	}
	return ds, nil
}

func fromMilli(m int64) float64 {
	if m < 0 {
		return -1
	}
	return float64(m) / 1000
}
