package store_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Databases of the test server: the Redis tests use their own, so that
// DBSIZE counts only their keys.
const (
	dbSuite  = 0
	dbExpiry = 9
)

// newRedis returns a store on the test server's database db, made from a
// URL as main makes it, and a second client to look at the server with.
// Keys starting with prefix are deleted when t ends.
func newRedis(t testing.TB, db int, prefix string) (*store.Redis, *redis.Client) {
	t.Helper()
	addr := redistest.Addr(t)
	r, err := store.NewRedisFromURL(fmt.Sprintf("redis://%s/%d", addr, db),
		store.ConnOptions{PoolSize: 8, DialTimeout: time.Second}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	t.Cleanup(func() {
		if prefix != "" {
			redistest.DeleteKeys(t, rdb, prefix)
		}
		_ = r.Close()
		_ = rdb.Close()
	})
	return r, rdb
}

// redisStore is what the Redis store offers to the shared tests.
type redisStore interface {
	limiter.AtomicStore
	Open(ctx context.Context) error
}

// forEachRedis runs f in a subtest for each Redis store, on the test
// server's database db; keys starting with prefix are deleted after each.
func forEachRedis(t *testing.T, db int, prefix string, f func(t *testing.T, st redisStore, rdb *redis.Client)) {
	t.Helper()
	t.Run("go-redis", func(t *testing.T) {
		r, rdb := newRedis(t, db, prefix)
		f(t, r, rdb)
	})
}

// inspected is a Redis store that lists its keys for the suite.
type inspected struct {
	limiter.AtomicStore
	rdb *redis.Client
}

var _ limitertest.Inspector = inspected{}

// Expiries reads the keys' absolute expiry with PEXPIRETIME.
func (s inspected) Expiries(ctx context.Context, prefix string, after int64) (map[string]int64, error) {
	var keys []string
	iter := s.rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Do(ctx, "PEXPIRETIME", k)
	}
	if _, err := pipe.Exec(ctx); err != nil && len(keys) > 0 {
		return nil, err
	}
	out := make(map[string]int64)
	for i, k := range keys {
		exp, err := cmds[i].Int64()
		if err != nil {
			return nil, err
		}
		if exp <= 0 || exp > after {
			out[k] = max(exp, 0)
		}
	}
	return out, nil
}

func TestRedisConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store {
		r, rdb := newRedis(t, dbSuite, limitertest.KeyPrefix)
		return inspected{r, rdb}
	})
}

// farBase is a time a week or two ahead, so that keys written with it
// outlive the test by Redis' clock.
var farBase = (time.Now().UnixMilli()/(7*86_400_000) + 2) * (7 * 86_400_000)

// randomOps returns n ops on a few keys with random algorithms, limits,
// costs (peeks, fractions, huge), refunds (one in five) and time steps
// from *now, which it advances.
func randomOps(rng *rand.Rand, prefix string, n int, now *int64) []limiter.Op {
	windows := []int64{1000, 60_000, 3_600_000, 86_400_000, 604_800_000, 1000 * 365 * 86_400_000}
	costs := []int64{0, 1, 500, 1000, 1000, 1000, 2500, 1 << 40, 1 << 62}
	keys := make([]limiter.Op, 12)
	for i := range keys {
		w := windows[rng.IntN(len(windows))]
		requests := 1 + rng.Int64N(20)
		op := limiter.Op{Key: fmt.Sprintf("%s{k%d}:", prefix, i), Algorithm: descriptors.Algorithm(rng.IntN(3)),
			Limit: requests*1000 + rng.Int64N(3)*250, Window: w}
		if op.Algorithm == descriptors.TokenBucket {
			op.Burst = (1 + rng.Int64N(2*requests)) * 1000
			g := gcd(requests*1000, w)
			op.RateNum, op.RateDen = requests*1000/g, w/g
			if (op.Burst+op.RateNum)*op.RateDen >= descriptors.MaxExact {
				op.Window, op.RateNum, op.RateDen = 1000, requests, 1
			}
		}
		keys[i] = op
	}
	return drawOps(rng, keys, n, now, func(limiter.Op) []int64 { return costs })
}

// drawOps returns n ops drawn from keys, each with a cost of costs(op),
// a refund one in five, at *now, which it advances by up to a fiftieth of
// the op's window or a second, half of the time.
func drawOps(rng *rand.Rand, keys []limiter.Op, n int, now *int64, costs func(limiter.Op) []int64) []limiter.Op {
	ops := make([]limiter.Op, n)
	for i := range ops {
		op := keys[rng.IntN(len(keys))]
		cs := costs(op)
		op.Cost = cs[rng.IntN(len(cs))]
		op.Refund = rng.IntN(5) == 0
		switch rng.IntN(4) {
		case 0:
			*now += rng.Int64N(op.Window/50 + 1)
		case 1:
			*now += rng.Int64N(1000)
		}
		op.Now = *now
		ops[i] = op
	}
	return ops
}

// sameExpiries checks that Redis and the memory store hold the same keys
// under prefix, expiring at the same times (keys expiring after now).
func sameExpiries(t *testing.T, ins inspected, m *store.Memory, prefix string, now int64) {
	t.Helper()
	ctx := context.Background()
	got, err := ins.Expiries(ctx, prefix, now)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := m.Expiries(ctx, prefix, now)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: redis expiries %v\nmemory expiries %v", prefix, got, want)
	}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// TestRedisMatchesMemory sends the same random ops to both stores, with
// Take and as all-or-nothing calls with TakeAll, at small limits and at
// the largest (largeOps), and compares every result and every key's expiry.
func TestRedisMatchesMemory(t *testing.T) {
	for _, tc := range []differential{
		{name: "take", prefix: "differential:", seed: [2]uint64{3, 5}, rounds: 10, ops: 2000},
		{name: "take all", prefix: "atomic-differential:", seed: [2]uint64{23, 29}, rounds: 5, ops: 1500, atomic: true},
		{name: "take, largest limits", prefix: "large-differential:", seed: [2]uint64{47, 53}, rounds: 4, ops: 1500, gen: largeOps},
		{name: "take all, largest limits", prefix: "large-atomic-differential:", seed: [2]uint64{59, 61}, rounds: 4, ops: 1500,
			atomic: true, gen: largeOps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachRedis(t, dbSuite, tc.prefix, func(t *testing.T, r redisStore, rdb *redis.Client) {
				tc.run(t, r, rdb)
			})
		})
	}
}

// differential is a run of TestRedisMatchesMemory: rounds of ops random
// from seed, in one Take a round or, atomic, in TakeAll calls of 1 to 5.
type differential struct {
	name, prefix string
	seed         [2]uint64
	rounds, ops  int
	atomic       bool
	gen          func(rng *rand.Rand, prefix string, n int, now *int64) []limiter.Op // default randomOps
}

func (tc differential) run(t *testing.T, r redisStore, rdb *redis.Client) {
	ins := inspected{r, rdb}
	m := newMemory(t, store.MemoryOptions{})
	rng := rand.New(rand.NewPCG(tc.seed[0], tc.seed[1]))
	now := farBase
	ctx := context.Background()
	take := func(st limiter.AtomicStore, ops []limiter.Op, res []limiter.Result) error {
		if tc.atomic {
			return st.TakeAll(ctx, ops, res)
		}
		return st.Take(ctx, ops, res)
	}
	commits, rejects := 0, 0
	for round := range tc.rounds {
		roundPrefix := fmt.Sprintf("%sr%d", tc.prefix, round)
		gen := tc.gen
		if gen == nil {
			gen = randomOps
		}
		var calls [][]limiter.Op
		if tc.atomic {
			calls = randomCalls(rng, gen(rng, roundPrefix, tc.ops, &now))
		} else {
			calls = [][]limiter.Op{gen(rng, roundPrefix, tc.ops, &now)}
		}
		mismatches := 0
		for c, call := range calls {
			got := make([]limiter.Result, len(call))
			want := make([]limiter.Result, len(call))
			if err := take(r, call, got); err != nil {
				t.Fatal(err)
			}
			if err := take(m, call, want); err != nil {
				t.Fatal(err)
			}
			if limiter.Rejects(call, want) {
				rejects++
			} else {
				commits++
			}
			for i := range call {
				if got[i] != want[i] {
					if mismatches++; mismatches <= 5 {
						t.Errorf("round %d call %d op %d %+v: redis %+v, memory %+v", round, c, i, call[i], got[i], want[i])
					}
				}
			}
		}
		sameExpiries(t, ins, m, roundPrefix, now)
	}
	if tc.atomic {
		t.Logf("%d calls committed, %d rejected", commits, rejects)
		if commits < 100 || rejects < 100 {
			t.Errorf("%d commits, %d rejects: the test needs more of both", commits, rejects)
		}
	}
}

// randomCalls cuts ops into all-or-nothing calls of 1 to 5 ops, each at
// one time and with random vetoes.
func randomCalls(rng *rand.Rand, ops []limiter.Op) [][]limiter.Op {
	var calls [][]limiter.Op
	for len(ops) > 0 {
		k := min(1+rng.IntN(5), len(ops))
		call := ops[:k:k]
		ops = ops[k:]
		for i := range call {
			call[i].Now = call[len(call)-1].Now
			call[i].Veto = limiter.Veto(rng.IntN(3))
		}
		calls = append(calls, call)
	}
	return calls
}

// TestRedisCountersAreIntegers checks that the scripts write integers
// without exponents at the largest values.
func TestRedisCountersAreIntegers(t *testing.T) {
	const prefix = "integers:"
	forEachRedis(t, dbSuite, prefix, func(t *testing.T, r redisStore, rdb *redis.Client) {
		countersAreIntegers(t, prefix, r, rdb)
	})
}

func countersAreIntegers(t *testing.T, prefix string, r redisStore, rdb *redis.Client) {
	ctx := context.Background()
	now := farBase + 1234
	ops := []limiter.Op{
		{Key: prefix + "{f}:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1 << 62, Now: now},
		{Key: prefix + "{f}:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1 << 62, Now: now},
		{Key: prefix + "{s}:", Algorithm: descriptors.SlidingWindow, Limit: 1 << 50, Window: 1000, Cost: 1<<50 - 1, Now: now},
		{Key: prefix + "{b}:", Algorithm: descriptors.TokenBucket, Burst: 1 << 50, RateNum: 1, RateDen: 7, Window: 1000, Cost: 3, Now: now},
	}
	if err := r.Take(ctx, ops, make([]limiter.Result, len(ops))); err != nil {
		t.Fatal(err)
	}
	sec := fmt.Sprint((now - now%1000) / 1000)
	for key, want := range map[string]string{
		prefix + "{f}:" + sec: "4503599627370496", // saturated at 2^52
		prefix + "{s}:" + sec: "1125899906842623",
	} {
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != want {
			t.Errorf("GET %s = %q, %v; want %q", key, got, err, want)
		}
	}
	raw, err := rdb.Get(ctx, prefix+"{b}:tokens").Bytes()
	got, want := bucketState(raw), [3]float64{1<<50 - 3, 0, float64(now)}
	if err != nil || got != want {
		t.Errorf("GET tokens = %v (%x), %v; want t, c, ts %v", got, raw, err, want)
	}
}

// bucketState decodes a token bucket's value, struct.pack('<ddd', t, c, ts)
// (lua/take.lua), or returns NaNs when it is not 24 bytes.
func bucketState(raw []byte) [3]float64 {
	if len(raw) != 24 {
		return [3]float64{math.NaN(), math.NaN(), math.NaN()}
	}
	var s [3]float64
	for i := range s {
		s[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return s
}

// takeAfterFlushes flushes the scripts before each of 4 calls of take,
// each with 3 charges of one fixed window, and checks that every charge
// counted exactly once.
func takeAfterFlushes(t *testing.T, rdb *redis.Client, take func(context.Context, []limiter.Op, []limiter.Result) error, key string) {
	t.Helper()
	ctx := context.Background()
	op := limiter.Op{Key: key, Algorithm: descriptors.FixedWindow, Limit: 100_000, Window: 3_600_000, Cost: 1000, Now: farBase}
	ops := []limiter.Op{op, op, op}
	res := make([]limiter.Result, len(ops))
	for call := range 4 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := take(ctx, ops, res); err != nil {
			t.Fatalf("call %d after SCRIPT FLUSH: %v", call, err)
		}
		for i, got := range res {
			if want := 100_000 - int64(call*3+i+1)*1000; !got.Allowed || got.Remaining != want {
				t.Errorf("call %d op %d = %+v, want remaining %d (each op counted once)", call, i, got, want)
			}
		}
	}
}

func TestRedisNoScriptBetweenCalls(t *testing.T) {
	const prefix = "noscript:"
	forEachRedis(t, dbSuite, prefix, func(t *testing.T, r redisStore, rdb *redis.Client) {
		ctx := context.Background()
		takeAfterFlushes(t, rdb, r.Take, prefix+"{a}:") // fixed.lua's calls
		if ok, err := rdb.ScriptExists(ctx, store.FixedSHA).Result(); err != nil || !ok[0] {
			t.Errorf("fixed.lua not loaded again after the flush: %v %v", ok, err)
		}
		// take.lua's: a token bucket.
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ops := []limiter.Op{{Key: prefix + "{b}:", Algorithm: descriptors.TokenBucket, Burst: 10_000, RateNum: 1, RateDen: 1,
			Window: 10_000, Cost: 1000, Now: farBase}}
		res := make([]limiter.Result, 1)
		if err := r.Take(ctx, ops, res); err != nil || !res[0].Allowed || res[0].Remaining != 9000 {
			t.Errorf("bucket after SCRIPT FLUSH: %+v, %v; want allowed, 9000 left", res[0], err)
		}
		if ok, err := rdb.ScriptExists(ctx, store.TakeSHA).Result(); err != nil || !ok[0] {
			t.Errorf("take.lua not loaded again after the flush: %v %v", ok, err)
		}
	})
}

// TestRedisNoScriptConcurrent flushes the script cache continuously while
// workers take ops, half of them through stores that have not loaded the
// scripts yet: no decision may fail, and every op counts exactly once.
func TestRedisNoScriptConcurrent(t *testing.T) {
	const prefix = "flush:"
	addr := redistest.Addr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 16})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { redistest.DeleteKeys(t, rdb, prefix); _ = client.Close(); _ = rdb.Close() })
	core, logs := observer.New(zapcore.DebugLevel)
	shared := store.NewRedis(client, zap.New(core), store.RedisOptions{})
	takeWhileFlushing(t, rdb, prefix, logs, func(w int) limiter.Store {
		if w%2 == 1 { // a store that loads the scripts first
			return store.NewRedis(client, zap.New(core), store.RedisOptions{})
		}
		return shared
	})
}

// takeWhileFlushing flushes the script cache continuously while workers
// take ops through storeFor(worker) for each call: no decision may fail,
// every op must count exactly once, and some call must have re-sent ops
// after NOSCRIPT (logged at debug level into logs).
func takeWhileFlushing(t *testing.T, rdb *redis.Client, prefix string, logs *observer.ObservedLogs, storeFor func(w int) limiter.Store) {
	t.Helper()
	ctx := context.Background()
	stop := make(chan struct{})
	var flushes atomic.Int64
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
				return
			}
			flushes.Add(1)
		}
	})

	const workers, calls = 6, 150
	var failures atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			op := limiter.Op{Key: fmt.Sprintf("%s{w%d}:", prefix, w), Algorithm: descriptors.FixedWindow,
				Limit: 1 << 40, Window: 3_600_000, Cost: 1000, Now: farBase}
			bucket := limiter.Op{Key: fmt.Sprintf("%s{b%d}:", prefix, w), Algorithm: descriptors.TokenBucket,
				Burst: 1 << 40, RateNum: 1, RateDen: 1, Window: 1000, Cost: 1000, Now: farBase}
			ops := []limiter.Op{op, bucket, op, op, bucket, op, op, op}
			res := make([]limiter.Result, len(ops))
			for range calls {
				if err := storeFor(w).Take(ctx, ops, res); err != nil {
					failures.Add(1)
					t.Errorf("Take: %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	flusher.Wait()

	if n := failures.Load(); n != 0 {
		t.Fatalf("%d failed decisions while scripts were flushed", n)
	}
	for w := range workers {
		got, err := rdb.Get(ctx, fmt.Sprintf("%s{w%d}:%d", prefix, w, farBase/1000)).Int64()
		if want := int64(calls * 6 * 1000); err != nil || got != want {
			t.Errorf("worker %d counter = %d, %v; want %d (every op exactly once)", w, got, err, want)
		}
	}
	resent := logs.FilterMessageSnippet("scripts missing").Len()
	t.Logf("%d flushes, %d calls re-sent ops after NOSCRIPT", flushes.Load(), resent)
	if resent == 0 {
		t.Error("no call saw NOSCRIPT; the test did not exercise recovery")
	}
}

// TestRedisKeysExpire uses the server's clock (Now == 0): every key carries
// a TTL no longer than its use, and all are gone after the windows end.
func TestRedisKeysExpire(t *testing.T) {
	const prefix = "expire:"
	forEachRedis(t, dbExpiry, prefix, func(t *testing.T, r redisStore, rdb *redis.Client) {
		keysExpire(t, prefix, r, rdb)
	})
}

func keysExpire(t *testing.T, prefix string, r redisStore, rdb *redis.Client) {
	ctx := context.Background()
	before, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ops := []limiter.Op{
		{Key: prefix + "{f}:", Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 1000, Cost: 1000},
		{Key: prefix + "{s}:", Algorithm: descriptors.SlidingWindow, Limit: 5000, Window: 1000, Cost: 1000},
		{Key: prefix + "{b}:", Algorithm: descriptors.TokenBucket, Burst: 10_000, RateNum: 10, RateDen: 1, Window: 1000, Cost: 5000},
	}
	start := time.Now()
	if err := r.Take(ctx, ops, make([]limiter.Result, len(ops))); err != nil {
		t.Fatal(err)
	}
	maxTTL := map[string]time.Duration{"{f}": time.Second, "{s}": 2 * time.Second, "{b}": 500 * time.Millisecond}
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 3 {
		t.Fatalf("keys = %v, %v; want 3", keys, err)
	}
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		limit := maxTTL[strings.Split(k, ":")[1]]
		if err != nil || ttl <= 0 || ttl > limit {
			t.Errorf("PTTL %s = %v, %v; want in (0, %v]", k, ttl, err, limit)
		}
	}
	deadline := start.Add(5 * time.Second)
	for {
		left, err := rdb.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		size, _ := rdb.DBSize(ctx).Result()
		if len(left) == 0 && (before != 0 || size == 0) {
			t.Logf("all keys gone after %v", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys left after %v: %v (DBSIZE %d)", time.Since(start), left, size)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRedisUnavailable: a server that is down fails fast with
// ErrUnavailable, and neither errors nor logs show the password.
func TestRedisUnavailable(t *testing.T) {
	const password = "s3cr3t-Pa55"
	core, logs := observer.New(zapcore.DebugLevel)
	url := fmt.Sprintf("redis://app:%s@%s/0", password, loopback.Addr(t))
	goRedis, err := store.NewRedisFromURL(url, store.ConnOptions{DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer goRedis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op := limiter.Op{Key: "down:{a}:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1000}
	for kind, r := range map[string]redisStore{"go-redis": goRedis} {
		for name, call := range map[string]func() error{
			"Take":    func() error { return r.Take(ctx, []limiter.Op{op}, make([]limiter.Result, 1)) },
			"TakeAll": func() error { return r.TakeAll(ctx, []limiter.Op{op}, make([]limiter.Result, 1)) },
			"Ping":    func() error { return r.Ping(ctx) },
			"Open":    func() error { return r.Open(ctx) },
		} {
			start := time.Now()
			err := call()
			if !errors.Is(err, limiter.ErrUnavailable) {
				t.Errorf("%s %s = %v, want ErrUnavailable", kind, name, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s %s took %v against a closed port", kind, name, d)
			}
			if err != nil && strings.Contains(err.Error(), password) {
				t.Errorf("%s %s error shows the password: %v", kind, name, err)
			}
		}
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, password) {
			t.Errorf("log shows the password: %s", line)
		}
	}
}

// TestRedisDeadline: Take gives up at ctx's deadline when Redis stalls.
func TestRedisDeadline(t *testing.T) {
	forEachRedis(t, dbSuite, "deadline:", redisDeadline)
}

func redisDeadline(t *testing.T, r redisStore, rdb *redis.Client) {
	ctx := context.Background()
	if err := r.Open(ctx); err != nil {
		t.Fatal(err)
	}
	// Scripts are write commands, so a WRITE pause stalls them while
	// CLIENT UNPAUSE still gets through.
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", 3000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ClientUnpause(ctx)
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	op := limiter.Op{Key: "deadline:{a}:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1000}
	err := r.Take(tctx, []limiter.Op{op}, make([]limiter.Result, 1))
	if !errors.Is(err, limiter.ErrUnavailable) {
		t.Errorf("Take during CLIENT PAUSE = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Take returned after %v, want about the 200ms deadline", d)
	}
}

func TestRedisInvalidOps(t *testing.T) {
	forEachRedis(t, dbSuite, "invalid:", func(t *testing.T, r redisStore, _ *redis.Client) {
		testInvalidOps(t, r)
	})
}

func TestRedisOptionsFromURL(t *testing.T) {
	opt, err := store.RedisOptionsFromURL("rediss://app:pw@cache.internal:6380/3?dial_timeout=3s",
		store.ConnOptions{PoolSize: 7, ReadTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if opt.Addr != "cache.internal:6380" || opt.DB != 3 || opt.TLSConfig == nil || opt.Username != "app" ||
		opt.Password != "pw" || opt.PoolSize != 7 || opt.ReadTimeout != 2*time.Second ||
		opt.DialTimeout != 3*time.Second || opt.MaxRetries != -1 || !opt.ContextTimeoutEnabled {
		t.Errorf("options = %+v", opt)
	}

	const password = "Hunter2-secret"
	for _, url := range []string{
		"http://app:" + password + "@host:6379",
		"unix://app:" + password + "@/tmp/redis.sock",
		"redis://app:" + password + "/x@host:6379",
		"redis://app:" + password + "@host:6379/notanumber",
		"redis://app:" + password + "@host:6379/0/1",
		"redis://app:" + password + "@host:6379/0?pool_size=lots",
		"redis://app:" + password + "@[::1",
		"redis://:" + password + "%zz@host",
	} {
		_, err := store.RedisOptionsFromURL(url, store.ConnOptions{})
		if err == nil {
			t.Errorf("%s: no error", store.RedactURL(url))
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("error shows the password: %v", err)
		}
		if strings.Contains(store.RedactURL(url), password) {
			t.Errorf("RedactURL shows the password: %s", store.RedactURL(url))
		}
	}
}

func TestRedisWarnsAboutClientRetries(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	store.NewRedis(client, zap.New(core), store.RedisOptions{})
	if logs.Len() != 1 {
		t.Errorf("NewRedis with a retrying client logged %d warnings, want 1", logs.Len())
	}
	r, err := store.NewRedisFromURL("redis://127.0.0.1:1", store.ConnOptions{}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if logs.Len() != 1 {
		t.Errorf("NewRedisFromURL logged %d warnings, want none", logs.Len()-1)
	}
}

func TestScriptHeaders(t *testing.T) {
	for name, src := range map[string]string{"take.lua": lua.Take, "fixed.lua": lua.Fixed, "atomic.lua": lua.Atomic} {
		head, _, ok := strings.Cut(src, "]]")
		if !strings.HasPrefix(src, "--[[") || !ok {
			t.Errorf("%s: no header comment", name)
			continue
		}
		for _, want := range []string{"KEYS[", "ARGV[1]", "tag", "Returns", "ms", "milli"} {
			if !strings.Contains(head, want) {
				t.Errorf("%s: header does not mention %q", name, want)
			}
		}
	}
}

func BenchmarkRedisTake(b *testing.B) {
	r, _ := newRedis(b, dbSuite, "bench:")
	benchmarkTake(b, "bench:{k%d}:", r.Take)
}

// benchmarkTake times sequential calls of take on 1, 10 and 100 ops, on
// the keys fmt.Sprintf(key, i).
func benchmarkTake(b *testing.B, key string, take func(context.Context, []limiter.Op, []limiter.Result) error) {
	ctx := context.Background()
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ops := make([]limiter.Op, n)
			for i := range ops {
				ops[i] = limiter.Op{Key: fmt.Sprintf(key, i), Algorithm: descriptors.FixedWindow,
					Limit: 1 << 40, Window: 60_000, Cost: 1000}
			}
			res := make([]limiter.Result, n)
			b.ReportAllocs()
			for b.Loop() {
				if err := take(ctx, ops, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRedisScripts times the script calls of Take, one Take after
// another at Redis TIME, on keys that exist after the first call: each
// algorithm with 1 and 25 decisions a call on as many keys, and 25 on one
// hot key (take.lua's groups). Besides Go's time and allocations it
// reports Redis' own time a call (INFO commandstats' usec_per_call of
// EVALSHA) and Go's allocations a decision. Run it alone: the stats are
// the whole server's.
//
//	go test ./pkg/store -run '^$' -bench RedisScripts -benchtime 2000x -count 5
func BenchmarkRedisScripts(b *testing.B) {
	ops := map[string]limiter.Op{
		"fixed":   {Algorithm: descriptors.FixedWindow, Limit: 1 << 50, Window: 3_600_000, Cost: 1000},
		"sliding": {Algorithm: descriptors.SlidingWindow, Limit: 1 << 50, Window: 3_600_000, Cost: 1000},
		"bucket":  {Algorithm: descriptors.TokenBucket, Burst: 4e12, RateNum: 10_000_000, RateDen: 9, Window: 3_600_000, Cost: 1000},
	}
	r, rdb := newRedis(b, dbSuite, "bench:")
	ctx := context.Background()
	for _, alg := range []string{"fixed", "sliding", "bucket"} {
		for _, shape := range []struct {
			name    string
			n, keys int
		}{{"1", 1, 1}, {"25", 25, 25}, {"25-hot", 25, 1}} {
			b.Run(alg+"/"+shape.name, func(b *testing.B) {
				in := make([]limiter.Op, shape.n)
				for i := range in {
					in[i] = ops[alg]
					in[i].Key = fmt.Sprintf("bench:{scripts/%s/%s/k%d}:", alg, shape.name, i%shape.keys)
				}
				res := make([]limiter.Result, shape.n)
				if err := r.Take(ctx, in, res); err != nil { // the keys exist
					b.Fatal(err)
				}
				if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				takes := 0
				for b.Loop() {
					if err := r.Take(ctx, in, res); err != nil {
						b.Fatal(err)
					}
					takes++
				}
				runtime.ReadMemStats(&after)
				calls, usec := evalshaTime(b, rdb)
				if calls > 0 {
					b.ReportMetric(float64(usec)/float64(calls), "redis-µs/call")
				}
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(takes*shape.n), "allocs/decision")
			})
		}
	}
}

// evalshaStats returns EVALSHA's calls and microseconds from INFO commandstats.
func evalshaTime(b *testing.B, rdb *redis.Client) (calls, usec int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
	}
	return calls, usec
}
