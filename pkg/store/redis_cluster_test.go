package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// newClusterStore returns a store over a client that store.NewClient made
// for c, and a plain client to look at the cluster with.
func newClusterStore(t testing.TB, c *redistest.Cluster) (*store.Redis, *redis.ClusterClient) {
	t.Helper()
	r := clientStore(t, store.ClientOptions{Type: "CLUSTER", URL: c.Seeds(),
		Conn: store.ConnOptions{PoolSize: 8, DialTimeout: time.Second}})
	if _, ok := r.Client().(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient(cluster) = %T, want *redis.ClusterClient", r.Client())
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	return r, rdb
}

// openClusterStore returns a store over c, opened (its scripts loaded),
// a plain client to look at the cluster with, and a context that ends
// after d or with the test.
func openClusterStore(t *testing.T, c *redistest.Cluster, d time.Duration) (*store.Redis, *redis.ClusterClient, context.Context) {
	t.Helper()
	r, rdb := newClusterStore(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	if err := r.Open(ctx); err != nil {
		t.Fatal(err)
	}
	return r, rdb, ctx
}

// clusterInspected lists a cluster store's keys for the suite, master by
// master.
type clusterInspected struct {
	*store.Redis
	rdb *redis.ClusterClient
}

var _ limitertest.Inspector = clusterInspected{}

func (s clusterInspected) Expiries(ctx context.Context, prefix string, after int64) (map[string]int64, error) {
	var mu sync.Mutex
	out := make(map[string]int64)
	err := s.rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		var keys []string
		iter := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		for _, k := range keys {
			exp, err := m.Do(ctx, "PEXPIRETIME", k).Int64()
			if err != nil {
				return err
			}
			if exp <= 0 || exp > after {
				mu.Lock()
				out[k] = max(exp, 0)
				mu.Unlock()
			}
		}
		return nil
	})
	return out, err
}

func TestRedisClusterConformance(t *testing.T) {
	c := redistest.StartCluster(t)
	r, rdb := newClusterStore(t, c)
	limitertest.Run(t, func(t *testing.T) limiter.Store { return clusterInspected{r, rdb} })
}

// scriptSHAs returns the digests of the scripts Open loads on a Cluster.
func scriptSHAs() []string {
	return []string{store.TakeSHA, store.FixedSHA, store.AtomicSHA, store.TakeCrossSHA}
}

// spreadKeys returns n keys (base keys, as the limiter builds them) and
// how many distinct masters serve them.
func spreadKeys(t *testing.T, c *redistest.Cluster, prefix string, n int) ([]string, int) {
	keys := make([]string, n)
	masters := map[string]bool{}
	for i := range keys {
		keys[i] = fmt.Sprintf("%s{k%d}:", prefix, i)
		masters[c.MasterOf(t, keys[i])] = true
	}
	return keys, len(masters)
}

// TestRedisClusterPipelines: one Take whose ops live on every master is
// decided in full, the scripts reach every node (replicas too, so that a
// promoted replica has them), and after SCRIPT FLUSH on every node the
// NOSCRIPT replies from each master are re-sent with EVAL and counted
// once.
func TestRedisClusterPipelines(t *testing.T) {
	c := redistest.StartCluster(t)
	r, rdb, ctx := openClusterStore(t, c, 30*time.Second)
	shas := scriptSHAs()
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		ok, err := node.ScriptExists(ctx, shas...).Result()
		node.Close()
		if err != nil || len(ok) != len(shas) || slices.Contains(ok, false) {
			t.Errorf("node %s: SCRIPT EXISTS = %v, %v; want every script on every node", addr, ok, err)
		}
	}

	keys, masters := spreadKeys(t, c, "spread:", 30)
	if masters != 3 {
		t.Fatalf("30 keys landed on %d masters, want 3", masters)
	}
	var ops []limiter.Op
	for i, k := range keys {
		ops = append(ops, limiter.Op{Key: k, Algorithm: descriptors.Algorithm(i % 3), Limit: 10_000, Window: 3_600_000,
			Burst: 10_000, RateNum: 1, RateDen: 1, Cost: 1000, Now: farBase})
	}
	res := make([]limiter.Result, len(ops))
	for call := range 3 {
		if call > 0 {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Take(ctx, ops, res); err != nil {
			t.Fatalf("call %d: Take across 3 masters: %v", call, err)
		}
		for i, got := range res {
			if want := int64(10_000 - (call+1)*1000); !got.Allowed || got.Remaining != want {
				t.Errorf("call %d op %d (%s) = %+v, want remaining %d (counted once)", call, i, ops[i].Algorithm, got, want)
			}
		}
	}
}

// dropProxy forwards TCP to a Redis node; with drop set it lets a command
// through but cuts the connection instead of passing the reply on, as a
// network failure after the server ran the command would.
type dropProxy struct {
	ln     net.Listener
	target string
	drop   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *dropProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *dropProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
		go func() {
			defer client.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					if p.drop.Load() {
						_ = server.Close()
						return
					}
					if _, err := client.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestRedisClusterDoesNotResend: when the connection breaks after a
// command ran, a plain go-redis ClusterClient re-sends the pipeline (up to
// MaxRedirects times), charging the op again each time; the client
// store.NewClient makes fails the call instead, and the op counts once.
func TestRedisClusterDoesNotResend(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "resend:{a}:"
	master := c.MasterOf(t, key)
	proxy := startDropProxy(t, master)
	// The master announces the proxy's port, so that clients reach it
	// through the proxy.
	admin := redis.NewClient(&redis.Options{Addr: master})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "cluster-announce-port", strconv.Itoa(proxy.port())).Err(); err != nil {
		t.Fatal(err)
	}
	viaProxy := net.JoinHostPort("127.0.0.1", strconv.Itoa(proxy.port()))
	announced := wait.Until(ctx, 20*time.Second, func() error {
		for _, addr := range c.Addrs() {
			node := redis.NewClient(&redis.Options{Addr: addr})
			slots, err := node.ClusterSlots(ctx).Result()
			node.Close()
			if err != nil || !servedBy(slots, viaProxy) {
				return fmt.Errorf("node %s does not announce the proxy %s: %v %v", addr, viaProxy, slots, err)
			}
		}
		return nil
	})
	if announced != nil {
		t.Fatal(announced)
	}

	op := limiter.Op{Key: key, Algorithm: descriptors.FixedWindow, Limit: 1 << 40, Window: 3_600_000, Cost: 1000, Now: farBase}
	counter := key + strconv.FormatInt(farBase/1000, 10)
	count := func() int64 {
		t.Helper()
		n, err := admin.Get(ctx, counter).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return n / 1000
	}

	// A plain ClusterClient, for comparison: it shows the hazard.
	plain := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1})
	defer plain.Close()
	sha, keys, args := store.TakeArgs(1, op)
	for _, src := range []string{lua.Take, lua.Fixed} {
		if err := plain.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	evalPlain := func() error {
		pipe := plain.Pipeline()
		pipe.EvalSha(ctx, sha, keys, args...)
		_, err := pipe.Exec(ctx)
		return err
	}
	if err := evalPlain(); err != nil {
		t.Fatalf("plain client before the drop: %v", err)
	}
	before := count()
	proxy.drop.Store(true)
	err := evalPlain()
	proxy.drop.Store(false)
	plainRuns := count() - before
	t.Logf("plain go-redis ClusterClient: one pipelined op after a dropped reply ran %d times (err %v)", plainRuns, err)
	for range 2 { // the dropped connection may still be pooled: use it up
		_ = plain.EvalSha(ctx, sha, keys, args...).Err()
	}
	before = count()
	proxy.drop.Store(true)
	err = plain.EvalSha(ctx, sha, keys, args...).Err()
	proxy.drop.Store(false)
	plainSingle := count() - before
	t.Logf("plain go-redis ClusterClient: one EVALSHA after a dropped reply ran %d times (err %v)", plainSingle, err)
	if plainRuns <= 1 && plainSingle <= 1 {
		t.Logf("go-redis no longer re-sends; store.NewClient's NoRetry marks are now belt and braces")
	}

	r, _ := newClusterStore(t, c)
	res := make([]limiter.Result, 1)
	if err := r.Take(ctx, []limiter.Op{op}, res); err != nil {
		t.Fatalf("store before the drop: %v", err)
	}
	before = count()
	proxy.drop.Store(true)
	err = r.Take(ctx, []limiter.Op{op}, res)
	proxy.drop.Store(false)
	if !errors.Is(err, limiter.ErrUnavailable) {
		t.Errorf("Take with the reply dropped = %v, want ErrUnavailable", err)
	}
	if runs := count() - before; runs != 1 {
		t.Errorf("Take with the reply dropped ran the op %d times, want once (no re-send)", runs)
	}
	// And the store recovers on a new connection.
	if err := r.Take(ctx, []limiter.Op{op}, res); err != nil {
		t.Errorf("Take after the drop: %v", err)
	}

	// A script sent alone, outside a pipeline, is not re-sent either.
	client, err := store.NewClient(store.ClientOptions{Type: "cluster", URL: c.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
		t.Fatalf("EVALSHA before the drop: %v", err)
	}
	before = count()
	proxy.drop.Store(true)
	err = client.EvalSha(ctx, sha, keys, args...).Err()
	proxy.drop.Store(false)
	if runs := count() - before; err == nil || runs != 1 {
		t.Errorf("EVALSHA with the reply dropped: error %v, ran %d times; want an error and once", err, runs)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after the drop: %v", err)
	}
}

func servedBy(slots []redis.ClusterSlot, addr string) bool {
	for _, s := range slots {
		if len(s.Nodes) > 0 && s.Nodes[0].Addr == addr {
			return true
		}
	}
	return false
}

// failoverLoad drives a store with fixed-window ops on one key from
// several workers, each reply telling the counter's value after its op,
// and records what happened around a failover.
type failoverLoad struct {
	st *store.Redis
	op limiter.Op
	redistest.Outage
	notRun    atomic.Int64 // failures of ops that cannot have run: refused, redis error replies
	ambiguous atomic.Int64 // failures of ops that may have run: timeouts, broken connections
}

const loadLimit = int64(1) << 40

func newFailoverLoad(st *store.Redis, key string) *failoverLoad {
	// Tomorrow, 01:00 UTC: the counter lives until tomorrow ends.
	now := (time.Now().UnixMilli()/86_400_000+1)*86_400_000 + 3_600_000
	return &failoverLoad{st: st, op: limiter.Op{Key: key, Algorithm: descriptors.FixedWindow, Limit: loadLimit,
		Window: 86_400_000, Cost: 1000, Now: now}}
}

// counterKey is the key of the op's window counter.
func (l *failoverLoad) counterKey() string {
	return l.op.Key + strconv.FormatInt((l.op.Now-l.op.Now%l.op.Window)/1000, 10)
}

// run sends ops from workers goroutines, one every 2 ms each at most,
// until stop closes.
func (l *failoverLoad) run(workers int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			res := make([]limiter.Result, 1)
			pace := time.NewTicker(2 * time.Millisecond)
			defer pace.Stop()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				err := l.st.Take(ctx, []limiter.Op{l.op}, res)
				cancel()
				l.record(err, res[0])
				select {
				case <-stop:
					return
				case <-pace.C:
				}
			}
		})
	}
	return &wg
}

func (l *failoverLoad) record(err error, res limiter.Result) {
	var rerr redis.Error
	switch {
	case err == nil:
	case errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &rerr):
		l.notRun.Add(1)
	default:
		l.ambiguous.Add(1)
	}
	l.Record((loadLimit-res.Remaining)/1000, err)
}

// report checks the figures against final, the counter's value on the new
// master after the load, and logs them.
func (l *failoverLoad) report(t *testing.T, what string, final int64, bound time.Duration) {
	f := l.Figures()
	notRun, ambiguous := l.notRun.Load(), l.ambiguous.Load()
	// Lost: hits acknowledged by the old master and lost with it. Gaps:
	// ops that ran without their reply arriving: an ambiguous failure, or
	// a re-send.
	t.Logf("%s failover: decisions failed from %v to %v after the kill (%d failed: %d could not have run, %d may have run; %d OK); "+
		"counter %d; %d acknowledged hits lost with the old master; %d ops ran without their reply; errors: %q",
		what, f.FirstFail.Round(time.Millisecond), f.LastFail.Round(time.Millisecond),
		f.Failed, notRun, ambiguous, f.OK, final, f.Lost, f.Gaps, f.Errors)
	if f.LastFail > bound {
		t.Errorf("decisions failed for %v after the kill, want under %v", f.LastFail, bound)
	}
	// Every op runs at most once: the ops that ran are the OK ones plus
	// some of the ambiguous failures, and none is re-sent.
	if f.Gaps > ambiguous {
		t.Errorf("%d ops ran without a reply but only %d failures were ambiguous: some op ran twice", f.Gaps, ambiguous)
	}
	if final+f.Lost > f.OK+ambiguous {
		t.Errorf("counter %d + %d lost > %d OK + %d ambiguous: some op ran twice", final, f.Lost, f.OK, ambiguous)
	}
	if final < 1 {
		t.Errorf("counter %d after the load", final)
	}
}

// checkFailover runs a load on key through r, kills the master old with
// kill, which returns the new master once Redis has failed over, and
// checks that decisions flow again within 15 s and that no op counted
// twice; rdb reads the counter.
func checkFailover(t *testing.T, what string, r *store.Redis, rdb redis.Cmdable, key, old string, kill func() string) {
	t.Helper()
	load := newFailoverLoad(r, key)
	stop := make(chan struct{})
	wg := load.run(4, stop)
	// The load runs: 500 decisions before the kill.
	if !wait.True(30*time.Second, func() bool { return load.Figures().OK >= 500 }) {
		close(stop)
		wg.Wait()
		t.Fatalf("no 500 decisions within 30 s before the kill: %+v", load.Figures())
	}
	killAt := time.Now()
	load.Kill(killAt)
	newMaster := kill()
	t.Logf("%s: %s took over from %s %v after the kill", what, newMaster, old, time.Since(killAt).Round(time.Millisecond))
	recovered := load.WaitRecovered(30*time.Second, time.Second)
	close(stop)
	wg.Wait()
	if !recovered {
		t.Fatalf("decisions did not flow again within 30 s of the kill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	final, err := rdb.Get(ctx, load.counterKey()).Int64()
	if err != nil {
		t.Fatalf("read counter: %v", err)
	}
	load.report(t, what, final/1000, 15*time.Second)
}

// TestRedisClusterFailover kills the master of a key under load: decisions
// fail until a replica takes over and the client finds it, then flow
// again, and no op is counted twice.
func TestRedisClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t)
	r, rdb, _ := openClusterStore(t, c, 60*time.Second)
	const key = "failover:{a}:"
	old := c.MasterOf(t, key)
	checkFailover(t, "cluster", r, rdb, key, old, func() string {
		c.Kill(t, old)
		return c.WaitFailover(t, key, old)
	})
}

// evalshaStats returns the EVALSHA calls a node ran and refused since its
// statistics were last reset.
func evalshaStats(ctx context.Context, t *testing.T, node *redis.Client) (calls, rejected int64) {
	t.Helper()
	info, err := node.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "rejected_calls":
				rejected = n
			}
		}
	}
	return calls, rejected
}

// TestRedisClusterOneCallPerMaster: a Take whose ops live in 30 slots over
// 3 masters costs each master one script call, which Redis runs rather
// than refuses (declared keys of several slots are refused with
// CROSSSLOT before the script runs), and decides every op once.
func TestRedisClusterOneCallPerMaster(t *testing.T) {
	c := redistest.StartCluster(t)
	r, _, ctx := openClusterStore(t, c, 30*time.Second)
	keys, n := spreadKeys(t, c, "onecall:", 30)
	if n != 3 {
		t.Fatalf("30 keys landed on %d masters, want 3", n)
	}
	var ops []limiter.Op
	masters := map[string]*redis.Client{}
	for i, k := range keys {
		ops = append(ops, limiter.Op{Key: k, Algorithm: descriptors.Algorithm(i % 3), Limit: 10_000, Window: 3_600_000,
			Burst: 10_000, RateNum: 1, RateDen: 1, Cost: 1000, Now: farBase})
		if addr := c.MasterOf(t, k); masters[addr] == nil {
			masters[addr] = redis.NewClient(&redis.Options{Addr: addr})
			defer masters[addr].Close()
		}
	}
	for _, m := range masters {
		if err := m.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	res := make([]limiter.Result, len(ops))
	for call := range 2 {
		if err := r.Take(ctx, ops, res); err != nil {
			t.Fatalf("Take %d: %v", call, err)
		}
		for i, got := range res {
			if want := int64(10_000 - (call+1)*1000); !got.Allowed || got.Remaining != want {
				t.Errorf("Take %d op %d (%s) = %+v, want remaining %d", call, i, ops[i].Algorithm, got, want)
			}
		}
	}
	for addr, m := range masters {
		if calls, rejected := evalshaStats(ctx, t, m); calls != 2 || rejected != 0 {
			t.Errorf("master %s ran %d EVALSHA and refused %d for 2 Takes, want 2 and 0", addr, calls, rejected)
		}
	}
}

// TestRedisClusterSlotMoved: when a slot moves to another master after
// the store learnt the slot map, a call to the old master leaves the
// moved slot's ops undecided, and they are decided once on the new
// master; the call's other ops are decided where they were sent.
func TestRedisClusterSlotMoved(t *testing.T) {
	c := redistest.StartCluster(t)
	_, rdb := newClusterStore(t, c)
	client, err := store.NewClient(store.ClientOptions{Type: "cluster", URL: c.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	r := store.NewRedis(client, zap.New(core), store.RedisOptions{CloseClient: true})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Open(ctx); err != nil {
		t.Fatal(err)
	}
	// Three ops on the slot that moves, one on another slot of its master.
	moving := []string{"moved:{m}:fw:", "moved:{m}:sw:", "moved:{m}:tb:"}
	from := c.MasterOf(t, moving[0])
	stay := ""
	for i := 0; stay == ""; i++ {
		k := fmt.Sprintf("stays:{s%d}:", i)
		if c.MasterOf(t, k) == from && store.SlotOf(k) != store.SlotOf(moving[0]) {
			stay = k
		}
	}
	// Each moving key twice, apart: the store puts a key's ops together,
	// and take.lua decides them as one group, which must move as one.
	var ops []limiter.Op
	for i, k := range append(append(moving, stay), moving...) {
		ops = append(ops, limiter.Op{Key: k, Algorithm: descriptors.Algorithm(i % 4 % 3), Limit: 10_000, Window: 3_600_000,
			Burst: 10_000, RateNum: 1, RateDen: 1, Cost: 1000, Now: farBase})
	}
	res := make([]limiter.Result, len(ops))
	if err := r.Take(ctx, ops, res); err != nil { // the store learns the slot map
		t.Fatal(err)
	}

	// Move the slot, its keys with it, to another master.
	var to string
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if m := c.MasterOf(t, "{"+k+"}"); m != from {
			to = m
			break
		}
	}
	src, dst := redis.NewClient(&redis.Options{Addr: from}), redis.NewClient(&redis.Options{Addr: to})
	defer src.Close()
	defer dst.Close()
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	slot := int64(store.SlotOf(moving[0]))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	must(err)
	if len(keys) != 3 {
		t.Fatalf("slot %d holds %q, want the 3 ops' keys", slot, keys)
	}
	host, port, _ := net.SplitHostPort(to)
	must(src.Do(ctx, append([]any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}, toAny(keys)...)...).Err())
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		err := node.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		node.Close()
		if err != nil && !strings.Contains(err.Error(), "only with masters") { // replicas follow their masters
			t.Fatalf("SETSLOT NODE on %s: %v", addr, err)
		}
	}
	if err := r.Take(ctx, ops, res); err != nil {
		t.Fatalf("Take after the slot moved: %v", err)
	}
	for i, got := range res {
		// Each Take charges a moving key twice, the staying key once.
		want := int64(7000)
		switch {
		case ops[i].Key == stay:
			want = 8000
		case i > len(moving):
			want = 6000
		}
		if !got.Allowed || got.Remaining != want {
			t.Errorf("op %d (%s on %s) = %+v, want remaining %d (counted once a Take)", i, ops[i].Algorithm, ops[i].Key, got, want)
		}
	}
	resent := logs.FilterMessageSnippet("a slot moved").All()
	if len(resent) != 1 || resent[0].ContextMap()["ops"] != int64(2*len(moving)) {
		t.Errorf("logged %v, want one resend of the %d ops of the moved slot", resent, 2*len(moving))
	}
	counter := moving[0] + strconv.FormatInt((farBase-farBase%3_600_000)/1000, 10)
	if n, err := dst.Get(ctx, counter).Int64(); err != nil || n != 4000 {
		t.Errorf("counter %s on the new master = %d, %v; want 4000", counter, n, err)
	}
	if n, err := rdb.Exists(ctx, counter).Result(); err != nil || n != 1 {
		t.Errorf("EXISTS %s = %d, %v", counter, n, err)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
