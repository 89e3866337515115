package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

func TestAllOrNothingInvalidOps(t *testing.T) {
	r, _ := newRedis(t, dbSuite, "takeall-invalid:")
	for name, st := range map[string]limiter.AllOrNothingStore{"memory": newMemory(t, store.MemoryOptions{}), "redis": r} {
		t.Run(name, func(t *testing.T) {
			valid := limiter.Op{Key: "takeall-invalid:{" + name + "}:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1000, Now: farBase}
			bad := map[string]limiter.Op{}
			for _, tc := range invalidOps {
				tc.op.Key, tc.op.Now = valid.Key, farBase
				if tc.name == "negative now" {
					tc.op.Now = -5
				}
				bad[tc.name] = tc.op
			}
			later := valid
			later.Now++
			bad["another time"] = later
			veto := valid
			veto.Veto = 7
			bad["unknown veto"] = veto
			for what, op := range bad {
				err := st.TakeAll(context.Background(), []limiter.Op{valid, op}, make([]limiter.Result, 2))
				if !errors.Is(err, store.ErrInvalidOp) || errors.Is(err, limiter.ErrUnavailable) {
					t.Errorf("%s: TakeAll = %v, want ErrInvalidOp only", what, err)
				}
			}
			err := st.TakeAll(context.Background(), []limiter.Op{valid, valid}, make([]limiter.Result, 1))
			if !errors.Is(err, store.ErrInvalidOp) {
				t.Errorf("short results: TakeAll = %v, want ErrInvalidOp", err)
			}
			// Nothing was decided: the key is untouched.
			res := make([]limiter.Result, 1)
			if err := st.TakeAll(context.Background(), []limiter.Op{valid}, res); err != nil || res[0].Remaining != 0 || !res[0].Allowed {
				t.Errorf("first valid TakeAll = %+v, %v; want allowed, 0 left", res[0], err)
			}
			if err := st.TakeAll(context.Background(), nil, nil); err != nil {
				t.Errorf("TakeAll(no ops) = %v", err)
			}
		})
	}
}

func TestAllOrNothingCanceled(t *testing.T) {
	r, _ := newRedis(t, dbSuite, "takeall-canceled:")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	op := limiter.Op{Key: "takeall-canceled:{a}:", Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 1000, Cost: 1000}
	m := newMemory(t, store.MemoryOptions{})
	for name, st := range map[string]limiter.AllOrNothingStore{"memory": m, "redis": r} {
		err := st.TakeAll(ctx, []limiter.Op{op}, make([]limiter.Result, 1))
		if !errors.Is(err, limiter.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s: TakeAll(canceled) = %v, want ErrUnavailable and context.Canceled", name, err)
		}
	}
	if m.Len() != 0 {
		t.Error("a canceled TakeAll wrote state")
	}
}

// TestAllOrNothingRedisNoScript: after SCRIPT FLUSH the next call re-sends the
// script with EVAL, and every op still counts exactly once.
func TestAllOrNothingRedisNoScript(t *testing.T) {
	const prefix = "takeall-noscript:"
	forEachRedis(t, dbSuite, prefix, func(t *testing.T, r redisStore, rdb *redis.Client) {
		takeAfterFlushes(t, rdb, r.TakeAll, prefix+"{a}/x:")
	})
}

// TestMemoryTakeAllNoDeadlock races calls over keys in many shards, each
// call naming its keys in a random order: the shard locks are taken in
// one order, so every call finishes, and the charges add up.
func TestMemoryTakeAllNoDeadlock(t *testing.T) {
	m := newMemory(t, store.MemoryOptions{})
	const workers, calls, keys = 8, 300, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 31))
			res := make([]limiter.Result, 6)
			for range calls {
				ops := make([]limiter.Op, 1+rng.IntN(6))
				for i := range ops {
					ops[i] = limiter.Op{Key: fmt.Sprintf("deadlock:{k%d}:", rng.IntN(keys)), Algorithm: descriptors.FixedWindow,
						Limit: 1 << 40, Window: 3_600_000, Cost: 1000, Now: farBase}
				}
				if err := m.TakeAll(context.Background(), ops, res); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("TakeAll calls deadlocked")
	}
}

// TestTakeAllHeader: the script documents its interface like the others.
func TestTakeAllHeader(t *testing.T) {
	head, _, ok := strings.Cut(lua.TakeAll, "]]")
	if !strings.HasPrefix(lua.TakeAll, "--[[") || !ok {
		t.Fatal("takeall.lua has no header comment")
	}
	for _, want := range []string{"KEYS[i]", "ARGV[1]", "Returns", "ms", "milli", "veto"} {
		if !strings.Contains(head, want) {
			t.Errorf("header does not mention %q", want)
		}
	}
}

// TestAllOrNothingCluster decides all-or-nothing requests through a Limiter on a
// real Redis Cluster: the keys of an all-or-nothing domain share the domain's hash
// tag, so one script call decides them, while the same descriptors' plain
// keys spread over several slots.
func TestAllOrNothingCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a six-node Redis Cluster")
	}
	c := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
	r := store.NewRedis(client, zaptest.NewLogger(t), store.RedisOptions{CloseClient: true})
	t.Cleanup(func() { _ = r.Close() })

	lim := func(rpu uint32, alg descriptors.Algorithm) *descriptors.Limit {
		return &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: rpu, Algorithm: alg}
	}
	rules := []descriptors.Descriptor{
		{Key: "a", Limit: lim(5, descriptors.FixedWindow)},
		{Key: "b", Limit: lim(5, descriptors.SlidingWindow)},
		{Key: "c", Limit: lim(5, descriptors.TokenBucket)},
		{Key: "one", Limit: lim(1, descriptors.FixedWindow)},
	}
	set, err := descriptors.NewSet([]descriptors.DomainConfig{
		{Name: "all", AllOrNothing: true, Descriptors: rules},
		{Name: "plain", Descriptors: rules},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.New(r, limiter.Options{KeyPrefix: "cluster"})
	l.SetRules(set)
	id := fmt.Sprint(time.Now().UnixNano())
	req := func(domain string, keys ...string) *limiter.Request[descriptors.Entry] {
		q := &limiter.Request[descriptors.Entry]{Domain: domain}
		for _, k := range keys {
			q.Descriptors = append(q.Descriptors, limiter.Descriptor[descriptors.Entry]{Entries: []descriptors.Entry{{Key: k, Value: id}}})
		}
		return q
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	masters := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "one"} {
		e := []descriptors.Entry{{Key: k, Value: id}}
		masters[c.MasterOf(t, string(limiter.AppendKey(nil, "cluster", "plain", &descriptors.Limit{}, e, "default")))] = true
	}
	t.Logf("the request's plain keys live on %d of 3 masters", len(masters))

	for i := range 3 {
		resp, err := limiter.Check(ctx, l, req("all", "a", "b", "c", "one"))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if want := []limiter.Code{limiter.OK, limiter.OverLimit, limiter.OverLimit}[i]; resp.Code != want {
			t.Errorf("request %d: %v, want %v", i, resp.Code, want)
		}
	}
	// Only the first request charged a, b and c.
	peek := req("all", "a", "b", "c")
	for i := range peek.Descriptors {
		peek.Descriptors[i].HasHits = true
	}
	resp, err := limiter.Check(ctx, l, peek)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range resp.Statuses {
		if st.Remaining != 4 {
			t.Errorf("descriptor %d: %d left, want 4 (one request charged)", i, st.Remaining)
		}
	}
}

// lostReply is a node client hook that runs a command and then, when
// armed, reports a read timeout, as if the reply had been lost.
type lostReply struct{ armed *atomic.Bool }

func (lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.armed.CompareAndSwap(true, false) {
			return &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
		return err
	}
}
func (lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAllOrNothingClusterDoesNotResend: a Cluster client re-sends a command
// whose reply was lost, whatever its MaxRetries; TakeAll's script must run
// once all the same, or a request would be charged twice.
func TestAllOrNothingClusterDoesNotResend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a six-node Redis Cluster")
	}
	c := redistest.StartCluster(t)
	var armed atomic.Bool
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1,
		NewClient: func(opt *redis.Options) *redis.Client {
			n := redis.NewClient(opt)
			n.AddHook(lostReply{&armed})
			return n
		}})
	r := store.NewRedis(client, zaptest.NewLogger(t), store.RedisOptions{CloseClient: true})
	t.Cleanup(func() { _ = r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	op := limiter.Op{Key: "resend:{d}/k=v:default:", Algorithm: descriptors.FixedWindow, Limit: 1 << 40, Window: 3_600_000, Cost: 1000, Now: farBase}
	counter := op.Key + fmt.Sprint(farBase/1000)
	count := func() int64 {
		n, err := client.Get(ctx, counter).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return n / 1000
	}
	res := make([]limiter.Result, 1)
	if err := r.TakeAll(ctx, []limiter.Op{op}, res); err != nil {
		t.Fatal(err)
	}

	// A plain EVAL shows the hazard.
	before := count()
	armed.Store(true)
	err := client.Eval(ctx, "return redis.call('INCRBY', KEYS[1], 1000)", []string{counter}).Err()
	t.Logf("a plain EVAL whose reply was lost ran %d times (err %v)", count()-before, err)

	before = count()
	armed.Store(true)
	if err := r.TakeAll(ctx, []limiter.Op{op}, res); !errors.Is(err, limiter.ErrUnavailable) {
		t.Errorf("TakeAll with its reply lost = %v, want ErrUnavailable", err)
	}
	if runs := count() - before; runs != 1 {
		t.Errorf("TakeAll with its reply lost ran %d times, want once", runs)
	}
}

// BenchmarkRedisTakeAll is BenchmarkRedisTake's ops decided all or
// nothing in one script call.
func BenchmarkRedisTakeAll(b *testing.B) {
	r, _ := newRedis(b, dbSuite, "bench:")
	benchmarkTake(b, "bench:{d}/k%d:", r.TakeAll)
}
