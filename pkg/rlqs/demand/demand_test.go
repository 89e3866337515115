package demand_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
	"github.com/fastlimit/fastlimit/pkg/store"
)

type demandStore interface {
	Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error)
}

// dbDemand is the test server's database for the demand tests.
const dbDemand = 11

// forEachDemand runs f against the memory demand store and the Redis one.
func forEachDemand(t *testing.T, f func(t *testing.T, d demandStore, prefix string)) {
	t.Run("memory", func(t *testing.T) {
		f(t, demand.NewMemory(nil), "mem")
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), DB: dbDemand})
		prefix := fmt.Sprintf("demandtest%d", time.Now().UnixNano())
		t.Cleanup(func() {
			redistest.DeleteKeys(t, rdb, prefix)
			_ = rdb.Close()
		})
		f(t, demand.NewRedis(rdb), prefix)
	})
}

func item(key, replica, client string, rate float64, op quota.Op) quota.Item {
	return quota.Item{Key: key, Demand: quota.Demand{Replica: replica, Client: client, Rate: rate}, Op: op}
}

// redisKey returns a client of the test Redis and a demand key of its
// own under prefix, deleted (and the client closed) at the end.
func redisKey(t *testing.T, prefix string) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), DB: dbDemand})
	key := fmt.Sprintf("%s%d:{d/a=1}:default:rlqs", prefix, time.Now().UnixNano())
	t.Cleanup(func() {
		rdb.Del(context.Background(), key)
		_ = rdb.Close()
	})
	return rdb, key
}

// bucketKey is the demand key of bucket {name: name} under prefix.
func bucketKey(prefix, name string) string { return prefix + ":{d/name=" + name + "}:default:rlqs" }

func sorted(ds []quota.Demand) []quota.Demand {
	out := slices.Clone(ds)
	slices.SortFunc(out, func(a, b quota.Demand) int {
		return strings.Compare(a.Replica+"/"+a.Client, b.Replica+"/"+b.Client)
	})
	return out
}

// TestDemandExchange: values from several replicas read back with their
// rates (milli-request precision, unknown kept), values expire after
// their ttl unless written again, deletes remove, and reads happen after
// the same call's writes.
func TestDemandExchange(t *testing.T) {
	forEachDemand(t, func(t *testing.T, d demandStore, prefix string) {
		ctx := context.Background()
		key := prefix + ":{d/name=a}:default:rlqs"
		t0 := time.Unix(1_900_000_000, 0)
		ttl := 3 * time.Second
		if _, err := d.Exchange(ctx, []quota.Item{item(key, "r1", "s1", 12.3456, quota.Write)}, ttl, t0); err != nil {
			t.Fatal(err)
		}
		got, err := d.Exchange(ctx, []quota.Item{item(key, "r2", "s2", -1, quota.Write|quota.Read)}, ttl, t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		want := []quota.Demand{{Replica: "r1", Client: "s1", Rate: 12.345}, {Replica: "r2", Client: "s2", Rate: -1}}
		if !slices.Equal(sorted(got[0]), want) {
			t.Fatalf("read = %v, want %v", got[0], want)
		}
		// At t0+3.5s, r1/s1 (written at t0) has expired; r2/s2 lives.
		got, err = d.Exchange(ctx, []quota.Item{item(key, "", "", 0, quota.Read)}, ttl, t0.Add(3500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[0], want[1:]) {
			t.Fatalf("read after expiry = %v, want %v", got[0], want[1:])
		}
		got, err = d.Exchange(ctx, []quota.Item{
			item(key, "r2", "s2", 0, quota.Delete|quota.Read),
			item(prefix+":{d/name=b}:default:rlqs", "r1", "s1", 5, quota.Write),
		}, ttl, t0.Add(3600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if len(got[0]) != 0 || got[1] != nil {
			t.Fatalf("after delete = %v", got)
		}
	})
}

// TestDemandExpiredDeleteKeepsRewrite: the delete of an expired value a
// read met (sent by Redis with a later exchange) does not remove
// the value when its client wrote it again since, though the write found
// the field still there; nor does quota.DeleteExpired remove a live one.
func TestDemandExpiredDeleteKeepsRewrite(t *testing.T) {
	forEachDemand(t, func(t *testing.T, d demandStore, prefix string) {
		ctx := context.Background()
		key := prefix + ":{d/name=x}:default:rlqs"
		t0 := time.Unix(1_900_000_000, 0)
		ttl := 3 * time.Second
		if _, err := d.Exchange(ctx, []quota.Item{item(key, "r1", "s1", 1, quota.Write)}, ttl, t0); err != nil {
			t.Fatal(err)
		}
		// At t0+4s r1/s1 has expired: the read leaves it out, and
		// Redis queues its delete.
		got, err := d.Exchange(ctx, []quota.Item{item(key, "r2", "s2", 2, quota.Write|quota.Read)}, ttl, t0.Add(4*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if want := []quota.Demand{{Replica: "r2", Client: "s2", Rate: 2}}; !slices.Equal(got[0], want) {
			t.Fatalf("read = %v, want %v", got[0], want)
		}
		// r1 was cut off and writes again; the queued delete follows.
		if _, err := d.Exchange(ctx, []quota.Item{item(key, "r1", "s1", 7, quota.Write)}, ttl, t0.Add(4500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		got, err = d.Exchange(ctx, []quota.Item{
			item(key, "r1", "s1", 0, quota.DeleteExpired),
			item(key, "", "", 0, quota.Read),
		}, ttl, t0.Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		want := []quota.Demand{{Replica: "r1", Client: "s1", Rate: 7}, {Replica: "r2", Client: "s2", Rate: 2}}
		if got[0] != nil || !slices.Equal(sorted(got[1]), want) {
			t.Fatalf("read after the deletes = %v, want %v", got, want)
		}
	})
}

// TestDemandLedger: a reserve grants a larger held rate only up to the cap
// less what the other live clients hold (never below its own), a smaller
// one in full; a write never lowers what a client holds; a client that
// left (quota.Left) still holds; expired values hold nothing; a value of
// an older replica (no held part) holds 0.
func TestDemandLedger(t *testing.T) {
	forEachDemand(t, func(t *testing.T, d demandStore, prefix string) {
		ctx, key, t0 := t.Context(), bucketKey(prefix, "l"), time.Unix(1_900_000_000, 0)
		ttl := 3 * time.Second
		held := func(replica, client string, rate, assigned float64) quota.Item {
			it := item(key, replica, client, rate, quota.Write)
			it.Demand.Assigned = assigned
			return it
		}
		reserve := func(replica, client string, want float64) quota.Item {
			it := item(key, replica, client, 10, quota.Reserve)
			it.Demand.Assigned, it.Cap = want, 100
			return it
		}
		run := func(after time.Duration, items ...quota.Item) [][]quota.Demand {
			t.Helper()
			got, err := d.Exchange(ctx, items, ttl, t0.Add(after))
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		run(0, held("r1", "a", 50, 60), held("r2", "gone", quota.Left, 25))
		for _, tc := range []struct {
			name   string
			item   quota.Item
			wanted float64
		}{
			{"a raise past the cap is cut to what is free", reserve("r2", "b", 30), 15},
			{"a raise is never cut below what the client holds", reserve("r2", "b", 20), 15},
			{"a cut is granted in full", reserve("r1", "a", 40), 40},
			{"the freed rate is granted", reserve("r2", "b", 40), 35},
		} {
			got := run(time.Second, tc.item)
			if len(got[0]) != 1 || got[0][0].Assigned != tc.wanted {
				t.Fatalf("%s: granted %v, want %v", tc.name, got[0], tc.wanted)
			}
		}
		// A write of a smaller held rate keeps the larger one.
		got := run(time.Second, held("r2", "b", 12, 1), item(key, "", "", 0, quota.Read))
		want := []quota.Demand{{Replica: "r1", Client: "a", Rate: 10, Assigned: 40},
			{Replica: "r2", Client: "b", Rate: 12, Assigned: 35}, {Replica: "r2", Client: "gone", Rate: quota.Left, Assigned: 25}}
		if !slices.Equal(sorted(got[1]), want) {
			t.Fatalf("read = %v, want %v", got[1], want)
		}
		// At t0+3.5s the one that left has expired and holds nothing.
		if got := run(3500*time.Millisecond, reserve("r1", "a", 70)); got[0][0].Assigned != 65 {
			t.Fatalf("after the expiry granted %v, want 65", got[0])
		}
	})
}

// TestDemandAdopt: a reserve adopts what it may from values not written
// for Fresh and from those that left, those that left first, then the
// nearest in rate, lowering them and marking them Left; a read with Fresh
// reads those not written for it as Left.
func TestDemandAdopt(t *testing.T) {
	forEachDemand(t, func(t *testing.T, d demandStore, prefix string) {
		ctx, key, t0 := t.Context(), bucketKey(prefix, "m"), time.Unix(1_900_000_000, 0)
		ttl := 10 * time.Second
		write := func(at time.Duration, client string, rate, held float64) {
			t.Helper()
			it := item(key, "r", client, rate, quota.Write)
			it.Demand.Assigned = held
			if _, err := d.Exchange(ctx, []quota.Item{it}, ttl, t0.Add(at)); err != nil {
				t.Fatal(err)
			}
		}
		write(0, "far", 500, 20)
		write(0, "near", 40, 20)
		write(0, "gone", quota.Left, 10)
		write(5*time.Second, "live", 40, 40)
		res := item(key, "r", "moved", 50, quota.Reserve)
		res.Demand.Assigned, res.Cap, res.Adopt, res.Fresh = 50, 100, 25, 3*time.Second
		read := item(key, "", "", 0, quota.Read)
		read.Fresh = 3 * time.Second
		got, err := d.Exchange(ctx, []quota.Item{res, read}, ttl, t0.Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// 10 free, 25 adopted from "gone" (10) and "near" (15 of 20).
		if got[0][0].Assigned != 35 || got[0][0].Adopted != 25 {
			t.Fatalf("granted %v, want 35, 25 of it adopted", got[0])
		}
		want := []quota.Demand{{Replica: "r", Client: "far", Rate: quota.Left, Assigned: 20}, // stale: read as Left
			{Replica: "r", Client: "gone", Rate: quota.Left, Assigned: 0},
			{Replica: "r", Client: "live", Rate: 40, Assigned: 40},
			{Replica: "r", Client: "moved", Rate: 50, Assigned: 35},
			{Replica: "r", Client: "near", Rate: quota.Left, Assigned: 5}}
		if !slices.Equal(sorted(got[1]), want) {
			t.Fatalf("read = %v, want %v", got[1], want)
		}
	})
}

// TestDemandLegacyValue: a value written by an older replica, without a
// held part, reads as holding 0.
func TestDemandLegacyValue(t *testing.T) {
	rdb, key := redisKey(t, "demandold")
	ctx, t0 := t.Context(), time.Unix(1_900_000_000, 0)
	if err := rdb.HSet(ctx, key, "old/s", fmt.Sprintf("%d:5000", t0.Add(time.Minute).UnixMilli())).Err(); err != nil {
		t.Fatal(err)
	}
	d := demand.NewRedis(rdb)
	it := item(key, "new", "s", 1, quota.Reserve)
	it.Demand.Assigned, it.Cap = 100, 100
	got, err := d.Exchange(ctx, []quota.Item{it, item(key, "", "", 0, quota.Read)}, time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got[0][0].Assigned != 100 {
		t.Fatalf("granted %v, want 100", got[0])
	}
	want := []quota.Demand{{Replica: "new", Client: "s", Rate: 1, Assigned: 100}, {Replica: "old", Client: "s", Rate: 5}}
	if !slices.Equal(sorted(got[1]), want) {
		t.Fatalf("read = %v, want %v", got[1], want)
	}
}

// TestDemandManyKeys: an exchange of more keys than one script call takes
// reads every key back in its place.
func TestDemandManyKeys(t *testing.T) {
	forEachDemand(t, func(t *testing.T, d demandStore, prefix string) {
		readsEveryKey(t, context.Background(), d, prefix, 300)
	})
}

// readsEveryKey writes n keys, key i at rate i, in one exchange that reads
// them back, and checks that each reads its own rate.
func readsEveryKey(t *testing.T, ctx context.Context, d demandStore, prefix string, n int) {
	t.Helper()
	items := make([]quota.Item, n)
	for i := range items {
		items[i] = item(fmt.Sprintf("%s:{d/n=%d}:default:rlqs", prefix, i), "r", "s", float64(i), quota.Write|quota.Read)
	}
	got, err := d.Exchange(ctx, items, time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if len(got[i]) != 1 || got[i][0].Rate != float64(i) {
			t.Fatalf("key %d read %v", i, got[i])
		}
	}
}

func TestDemandBadItems(t *testing.T) {
	forEachDemand(t, func(t *testing.T, d demandStore, prefix string) {
		for _, it := range []quota.Item{
			item(prefix+":k", "r/x", "s", 1, quota.Write),
			item(prefix+":k", "r", "", 1, quota.Write),
			item(prefix+":k", "r", "s", 1, quota.Write|quota.Delete),
			item(prefix+":k", "r", "s", 1, quota.Write|quota.DeleteExpired),
			item(prefix+":k", "r", "s", 1, quota.Reserve|quota.Read),
			item(prefix+":k", "r", "s", 1, quota.Reserve|quota.Delete),
		} {
			if _, err := d.Exchange(context.Background(), []quota.Item{it}, time.Second, time.Time{}); !errors.Is(err, demand.ErrBadItem) {
				t.Errorf("%+v: err = %v, want ErrBadItem", it, err)
			}
		}
	})
}

// TestRedisDemandExpiresKey: a bucket's hash expires with its last write,
// and a flushed script is loaded again.
func TestRedisDemandExpiresKey(t *testing.T) {
	rdb, key := redisKey(t, "demandttl")
	ctx := context.Background()
	d := demand.NewRedis(rdb)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exchange(ctx, []quota.Item{item(key, "r", "s", 1, quota.Write)}, 15*time.Second, time.Time{}); err != nil {
		t.Fatal(err)
	}
	pttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil || pttl <= 14*time.Second || pttl > 15*time.Second {
		t.Fatalf("PTTL = %v, %v; want about 15s", pttl, err)
	}
}

// TestRedisDemandDown: an exchange with Redis gone fails as unavailable.
func TestRedisDemandDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: loopback.Addr(t),
		MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	_, err := demand.NewRedis(rdb).Exchange(context.Background(),
		[]quota.Item{item("k", "r", "s", 1, quota.Write)}, time.Second, time.Time{})
	if !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// TestRedisDemandCluster: on a Cluster, an exchange over keys of many
// slots reads each back.
func TestRedisDemandCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	client, err := store.NewClient(store.ClientOptions{Type: "CLUSTER", URL: c.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	readsEveryKey(t, ctx, demand.NewRedis(client), "dc", 200)
}

// BenchmarkRedisDemand measures exchanges of 1,000 buckets with the test
// Redis: writes only, and writes with every bucket read back (100 clients
// in each), reporting Redis CPU per bucket item (INFO's used_cpu_*).
func BenchmarkRedisDemand(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), DB: dbDemand})
	defer rdb.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("demandbench%d", time.Now().UnixNano())
	defer redistest.DeleteKeys(b, rdb, prefix)
	d := demand.NewRedis(rdb)
	for c := range 100 { // 100 clients in every bucket
		items := make([]quota.Item, 1000)
		for i := range items {
			items[i] = item(fmt.Sprintf("%s:{d/n=%d}:default:rlqs", prefix, i), "r", fmt.Sprint(c), 10, quota.Write)
		}
		if _, err := d.Exchange(ctx, items, time.Minute, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, op := range []quota.Op{quota.Write, quota.Write | quota.Read} {
		b.Run(fmt.Sprintf("op=%d", op), func(b *testing.B) {
			items := make([]quota.Item, 1000)
			for i := range items {
				items[i] = item(fmt.Sprintf("%s:{d/n=%d}:default:rlqs", prefix, i), "r", "0", 10, op)
			}
			cpu0 := redistest.CPU(b, rdb.Options().Addr)
			b.ResetTimer()
			for range b.N {
				if _, err := d.Exchange(ctx, items, time.Minute, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((redistest.CPU(b, rdb.Options().Addr)-cpu0).Seconds()/float64(b.N*len(items))*1e6, "redis-µs/item")
		})
	}
}

// TestRedisDemandDeletesExpired: an expired value a read meets is left out
// of the answer and deleted by the next exchange.
func TestRedisDemandDeletesExpired(t *testing.T) {
	rdb, key := redisKey(t, "demandexp")
	ctx := context.Background()
	d := demand.NewRedis(rdb)
	t0 := time.Unix(1_900_000_000, 0)
	if _, err := d.Exchange(ctx, []quota.Item{item(key, "r", "old", 1, quota.Write)}, time.Second, t0); err != nil {
		t.Fatal(err)
	}
	got, err := d.Exchange(ctx, []quota.Item{item(key, "r", "new", 2, quota.Write|quota.Read)}, time.Minute, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 1 || got[0][0].Client != "new" {
		t.Fatalf("read = %v, want only the live value", got[0])
	}
	if n := rdb.HLen(ctx, key).Val(); n != 2 {
		t.Fatalf("HLEN = %d before the next exchange, want 2", n)
	}
	if _, err := d.Exchange(ctx, []quota.Item{item(key, "r", "new", 2, quota.Write)}, time.Minute, t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if fields := rdb.HKeys(ctx, key).Val(); len(fields) != 1 || fields[0] != "r/new" {
		t.Fatalf("fields = %v after the next exchange, want r/new", fields)
	}
}
