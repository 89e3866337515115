package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// The fault tests put a fault-injecting proxy between each Redis store path
// and real redis-servers, break the network as issue 11 lists, and check
// every answer against what Redis really did: no answer may carry another
// key's count, Redis may count no more than the answered calls plus those
// whose replies were lost, and the store comes back by itself.

// faulter is a faultproxy.Proxy, or a Set in front of a Cluster's or a
// sentinel setup's nodes.
type faulter interface {
	Add(faultproxy.Fault) *faultproxy.Rule
	Clear()
	CutAll(refuseFor time.Duration)
	Stats() faultproxy.Stats
}

// faultPath is one way the server reaches Redis, behind proxies.
type faultPath struct {
	name  string
	fx    faulter
	admin redis.UniversalClient // straight to Redis, not through the proxies
	db    int                   // the database the store selects
	open  func(t *testing.T) limiter.Store
}

// faultPaths returns every store path: single Redis (selecting db 1, so
// that every connection has a handshake), Cluster and Sentinel.
func faultPaths(t *testing.T) []*faultPath {
	addr := redistest.Addr(t)
	nop := zap.NewNop()
	p := faultproxy.New(t, addr)
	admin := redis.NewClient(&redis.Options{Addr: addr, DB: 1})
	t.Cleanup(func() { _ = admin.Close() })
	paths := []*faultPath{{name: "single", fx: p, admin: admin, db: 1, open: func(t *testing.T) limiter.Store {
		c, err := store.NewClient(store.ClientOptions{URL: "redis://" + p.Addr() + "/1"})
		if err != nil {
			t.Fatal(err)
		}
		r := store.NewRedis(c, nop, store.RedisOptions{CloseClient: true})
		t.Cleanup(func() { _ = r.Close() })
		return r
	}}}
	if testing.Short() {
		return paths
	}

	c := redistest.StartCluster(t)
	cg := faultproxy.NewSet(t, c.Addrs()[0])
	cadmin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cadmin.Close() })
	paths = append(paths, &faultPath{name: "cluster", fx: cg, admin: cadmin, open: func(t *testing.T) limiter.Store {
		client, err := store.NewClient(store.ClientOptions{Type: store.TypeCluster, URL: cg.Addr(c.Addrs()[0])})
		if err != nil {
			t.Fatal(err)
		}
		r := store.NewRedis(client, nop, store.RedisOptions{CloseClient: true})
		t.Cleanup(func() { _ = r.Close() })
		return r
	}})

	s := redistest.StartSentinel(t)
	sentinels := sentinelAddrs(s)
	sg := faultproxy.NewSet(t, sentinels...)
	sadmin := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName, SentinelAddrs: sentinels})
	t.Cleanup(func() { _ = sadmin.Close() })
	paths = append(paths, &faultPath{name: "sentinel", fx: sg, admin: sadmin, open: func(t *testing.T) limiter.Store {
		client, err := store.NewClient(store.ClientOptions{Type: store.TypeSentinel,
			URL: redistest.MasterName + "," + strings.Join(sg.Addrs(sentinels...), ",")})
		if err != nil {
			t.Fatal(err)
		}
		r := store.NewRedis(client, nop, store.RedisOptions{CloseClient: true})
		t.Cleanup(func() { _ = r.Close() })
		return r
	}})
	return paths
}

// Load parameters: every caller owns a key whose counter starts at
// caller x span, so that an answer carrying another caller's count is
// caught.
const (
	faultSpan   = 1_000_000_000_000 // milli-requests
	faultLimit  = 1 << 50
	faultWindow = 3_600_000
)

// faultLoad is what a run of callers saw, and their counters.
type faultLoad struct {
	*faultproxy.Load
	keys []string // each caller's counter
}

func (l *faultLoad) total() int64 { return l.OK.Load() + l.Failed.Load() }

// notSent counts the failed calls that were never sent.
func (l *faultLoad) notSent() int64 { return int64(l.Errors()["not sent"]) }

func (l *faultLoad) String() string {
	return fmt.Sprintf("%d ok, %d failed (%d not sent), %d wrong; errors %v", l.OK.Load(), l.Failed.Load(),
		l.notSent(), l.Wrong.Load(), l.Errors())
}

// counted returns how many hits Redis counted on the callers' keys.
func (l *faultLoad) counted(t *testing.T, admin redis.UniversalClient) int64 {
	t.Helper()
	var n int64
	for c, k := range l.keys {
		v, err := admin.Get(context.Background(), k).Int64()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		n += (v - int64(c)*faultSpan) / 1000
	}
	return n
}

// runLoad runs callers that each take one hit on their own key, back to
// back (or every pace), each call bounded by timeout, while during runs
// and for d after it (faultproxy.RunLoad).
func runLoad(t *testing.T, fp *faultPath, st limiter.Store, callers int, d, timeout, pace time.Duration, during func(*faultproxy.Load)) *faultLoad {
	t.Helper()
	ctx := context.Background()
	run := fmt.Sprintf("faults:%d", time.Now().UnixNano())
	now := farBase
	ws := now - now%faultWindow
	l := &faultLoad{}
	ops := make([]limiter.Op, callers)
	for c := range callers {
		base := fmt.Sprintf("%s:{c%d}:", run, c)
		key := fmt.Sprintf("%s%d", base, ws/1000)
		if err := fp.admin.Set(ctx, key, int64(c)*faultSpan, 10*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		l.keys = append(l.keys, key)
		ops[c] = limiter.Op{Key: base, Algorithm: descriptors.FixedWindow, Limit: faultLimit, Window: faultWindow,
			Cost: 1000, Now: now}
	}
	results := make([][]limiter.Result, callers)
	for c := range results {
		results[c] = make([]limiter.Result, 1)
	}
	l.Load = faultproxy.RunLoad(callers, d, pace, faultSpan, func(c int) (int64, bool, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		res := results[c]
		if err := st.Take(cctx, ops[c:c+1], res); err != nil {
			return 0, false, err
		}
		return faultLimit - res[0].Remaining, res[0].Allowed, nil
	}, errKind, during)
	return l
}

// awaitLoad waits until cond holds of the load running beside (30 s at
// most, or it fails t): faults come once the load has made some calls,
// and last some number of calls.
func awaitLoad(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !wait.True(30*time.Second, cond) {
		t.Fatalf("the load did not reach %s within 30 s", what)
	}
}

// errKind names an error's kind for the logs.
func errKind(err error) string {
	switch {
	case errors.Is(err, store.ErrNotSent):
		return "not sent"
	case errors.Is(err, store.ErrReplyMismatch):
		return "reply mismatch"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i < 60 {
		return s[i+2:]
	}
	return "other"
}

// checkCounts checks the load's answers against Redis' counters: nothing
// wrong, every OK answer counted, and no more counted than OK answers plus
// the failed calls whose ops may have run (at most maxLost).
func checkCounts(t *testing.T, fp *faultPath, l *faultLoad, maxLost int64) {
	t.Helper()
	if w := l.Wrong.Load(); w != 0 {
		t.Errorf("%d answers carried a count that is not their caller's: %v", w, l.FirstWrong())
	}
	counted, ok := l.counted(t, fp.admin), l.OK.Load()
	if counted < ok {
		t.Errorf("Redis counted %d hits for %d OK answers", counted, ok)
	}
	if lost := counted - ok; lost > maxLost {
		t.Errorf("Redis counted %d hits beyond the %d OK answers, want at most %d", lost, ok, maxLost)
	}
	if counted-ok > l.Failed.Load()-l.notSent() {
		t.Errorf("Redis counted %d hits beyond the OK answers, but only %d failed calls were sent", counted-ok,
			l.Failed.Load()-l.notSent())
	}
}

// TestFaults runs every fault on every store path.
func TestFaults(t *testing.T) {
	for _, fp := range faultPaths(t) {
		t.Run(fp.name, func(t *testing.T) {
			for _, sc := range faultScenarios {
				t.Run(sc.name, func(t *testing.T) {
					fp.fx.Clear()
					defer fp.fx.Clear()
					sc.run(t, fp)
				})
			}
		})
	}
}

var faultScenarios = []struct {
	name string
	run  func(t *testing.T, fp *faultPath)
}{
	{"DropMidReply", func(t *testing.T, fp *faultPath) {
		dropFive(t, fp, func() faultproxy.Fault {
			return &faultproxy.DropMidReply{Match: faultproxy.Nth(1, "EVALSHA", "EVAL"), After: 5}
		})
	}},
	{"DropAndLose", func(t *testing.T, fp *faultPath) {
		dropFive(t, fp, func() faultproxy.Fault { return &faultproxy.DropAndLose{Match: faultproxy.Nth(1, "EVALSHA", "EVAL")} })
	}},
	{"ExtraReply", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		// Shaped like a script's reply (take.lua's, fixed.lua's to a call
		// of one op): only its tag can tell it apart.
		one := fmt.Sprintf("12345 0 0 %d", faultLimit-7000)
		for _, extra := range []faultproxy.ExtraReply{
			{Reply: faultproxy.Ints(12345, 0, 0, faultLimit-7000)},
			{Raw: fmt.Appendf(nil, "$%d\r\n%s\r\n", len(one), one)},
		} {
			for _, before := range []bool{true, false} {
				l := runLoad(t, fp, st, 32, time.Second, time.Second, 0, func(l *faultproxy.Load) {
					awaitLoad(t, "100 calls OK", func() bool { return l.OK.Load() >= 100 })
					<-fp.fx.Add(&faultproxy.ExtraReply{Match: faultproxy.Nth(1, "EVALSHA"), Reply: extra.Reply, Raw: extra.Raw, Before: before}).Done()
				})
				t.Logf("raw=%t before=%t: %v", extra.Raw != nil, before, l)
				checkCounts(t, fp, l, l.Failed.Load())
				checkRecovers(t, fp, st)
			}
		}
	}},
	{"HeldReplies", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		const callers = 32
		var rule *faultproxy.Rule
		// Redis' replies are held while 25 calls a caller time out.
		l := runLoad(t, fp, st, callers, 500*time.Millisecond, 50*time.Millisecond, 0, func(l *faultproxy.Load) {
			awaitLoad(t, "100 calls OK", func() bool { return l.OK.Load() >= 100 })
			rule = fp.fx.Add(&faultproxy.Freeze{})
			failed := l.Failed.Load()
			awaitLoad(t, "25 failed calls a caller", func() bool { return l.Failed.Load() >= failed+25*callers })
			rule.Release()
		})
		t.Logf("%v; %d replies held", l, rule.Applied())
		// Only the calls sent while Redis' replies were held may have run
		// (checkCounts: never one that was not sent), and calls that wait
		// while every send is held are dropped, not sent late. Without the
		// server's breaker, a failed send (go-redis' own timeouts) frees
		// its place for another, hence 10 % here; e2e checks the issue's
		// 2 % with the default flags.
		checkCounts(t, fp, l, l.Failed.Load()/10)
		checkRecovers(t, fp, st)
	}},
	{"SlowHandshake", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		checkRecovers(t, fp, st)
		// The share of calls OK within 50 ms on this machine, as loaded as
		// it is, without a fault: the bound below is relative to it.
		base := runLoad(t, fp, st, 32, time.Second, 50*time.Millisecond, 0, nil)
		baseOK, baseTotal := base.OK.Load(), base.total()
		if baseOK == 0 {
			t.Fatalf("without the fault, no call was OK within 50 ms (%v): the bound below would hold whatever happens", base)
		}
		// Every new connection's first three replies (its handshake, and
		// the first script calls when the handshake is shorter) come after
		// 80 ms, longer than any call waits; then every connection is cut.
		fp.fx.Add(&faultproxy.SlowHandshake{First: 3, Delay: 80 * time.Millisecond})
		fp.fx.CutAll(0)
		l := runLoad(t, fp, st, 32, 3*time.Second, 50*time.Millisecond, 0, nil)
		t.Logf("without the fault: %v; with it: %v", base, l)
		ok, total := l.OK.Load(), l.total()
		if ok*10*baseTotal < total*9*baseOK {
			t.Errorf("%d of %d calls OK within 3 s of the cut, want at least 90 %% of the %d of %d OK without it",
				ok, total, baseOK, baseTotal)
		}
		// A script call written in time whose reply is late ran: it may
		// be counted, though its caller was answered Unavailable.
		checkCounts(t, fp, l, l.Failed.Load())
	}},
	{"DialWait", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		checkRecovers(t, fp, st)
		// Every new connection's handshake answers after 300 ms; then
		// every connection is cut: a call waits for a new connection, and
		// its caller gives up at 50 ms, long before it is ready. Nothing of
		// it may be written once it is (onceCmd): before, each such call
		// was counted when the handshake ended.
		fp.fx.Add(&faultproxy.SlowHandshake{Match: faultproxy.Match{Commands: []string{"HELLO", "AUTH", "SELECT", "CLIENT", "READONLY"}},
			First: 5, Delay: 300 * time.Millisecond})
		fp.fx.CutAll(0)
		ctx := context.Background()
		base := fmt.Sprintf("faults:dialwait:%d:{k}:", time.Now().UnixNano())
		now := farBase
		ops := []limiter.Op{{Key: base, Algorithm: descriptors.FixedWindow, Limit: faultLimit, Window: faultWindow, Cost: 1000, Now: now}}
		counter := fmt.Sprintf("%s%d", base, (now-now%faultWindow)/1000)
		res := make([]limiter.Result, 1)
		takes := []func(context.Context, []limiter.Op, []limiter.Result) error{st.Take}
		if all, ok := st.(limiter.AllOrNothingStore); ok {
			takes = append(takes, all.TakeAll)
		}
		for _, take := range takes {
			for range 3 {
				cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				err := take(cctx, ops, res)
				cancel()
				if err == nil {
					t.Fatal("a call decided while every connection's handshake took 300 ms")
				}
			}
		}
		// Every connection's handshake is over, and the store answers
		// again (20 calls in a row): by then, a call kept for a slow
		// connection would have been written.
		wait.For(t, 30*time.Second, func() bool { return fp.fx.Stats().Holding == 0 })
		checkRecovers(t, fp, st)
		if n, err := fp.admin.Exists(ctx, counter).Result(); err != nil || n != 0 {
			v, _ := fp.admin.Get(ctx, counter).Result()
			t.Errorf("counter %s = %q (exists %d, %v): calls answered Unavailable were written once their connection was ready",
				counter, v, n, err)
		}
	}},
	{"HandshakeOutlastsCalls", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		checkRecovers(t, fp, st)
		// Every new connection's handshake (two round trips, each answered
		// 150 ms late) takes 300 ms, six times what a call waits; then every
		// connection is cut. Each send that
		// dials finds its callers gone once the handshake is over, and
		// writes the placeholder of an unsent call: its connection must
		// outlive that, or no call is ever answered (each send dials anew).
		// Calls of two ops expect take.lua's integers: before, the
		// placeholder's string reply broke their parse, and go-redis closed
		// the connection.
		fp.fx.Add(&faultproxy.SlowHandshake{Match: faultproxy.Match{Commands: []string{"HELLO", "AUTH", "SELECT", "CLIENT", "READONLY"}},
			First: 5, Delay: 150 * time.Millisecond})
		fp.fx.CutAll(0)
		base := fmt.Sprintf("faults:handshake:%d:{k}:", time.Now().UnixNano())
		ops := []limiter.Op{
			{Key: base + "a:", Algorithm: descriptors.FixedWindow, Limit: faultLimit, Window: faultWindow, Cost: 1000, Now: farBase},
			{Key: base + "b:", Algorithm: descriptors.FixedWindow, Limit: faultLimit, Window: faultWindow, Cost: 1000, Now: farBase},
		}
		res := make([]limiter.Result, len(ops))
		calls := 0
		var last error
		answered := wait.True(10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			calls++
			last = st.Take(ctx, ops, res)
			return last == nil
		})
		if !answered {
			t.Fatalf("none of %d calls of two ops was answered within 50 ms in the 10 s after the cut (last: %v; %d connections accepted): "+
				"each connection closed once the handshake it waited for was over", calls, last, fp.fx.Stats().Accepted)
		}
	}},
	{"SplitReplies", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		fp.fx.Add(&faultproxy.SplitReplies{MaxChunk: 3, Seed: 1})
		l := runLoad(t, fp, st, 16, time.Second, 2*time.Second, 0, nil)
		t.Logf("%v", l)
		if l.Failed.Load() != 0 {
			t.Errorf("%d calls failed on split replies", l.Failed.Load())
		}
		checkCounts(t, fp, l, 0)
	}},
	{"ErrorReplies", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		for _, e := range []string{faultproxy.BusyError, faultproxy.OOMError, faultproxy.ReadOnlyError, faultproxy.LoadingError} {
			rule := fp.fx.Add(&faultproxy.ErrorReply{Match: faultproxy.Match{Commands: []string{"EVALSHA"}, Times: 3}, Err: e})
			l := runLoad(t, fp, st, 8, 500*time.Millisecond, time.Second, 0, nil)
			t.Logf("%s: %v", strings.Fields(e)[0], l)
			if rule.Applied() != 3 || l.Failed.Load() < 1 {
				t.Errorf("%s: %d faked, %d failed calls; want 3 faked and their calls failed", strings.Fields(e)[0],
					rule.Applied(), l.Failed.Load())
			}
			// A faked error means Redis never ran the call.
			checkCounts(t, fp, l, 0)
			checkRecovers(t, fp, st)
		}
	}},
	{"Stalls", func(t *testing.T, fp *faultPath) {
		st := fp.open(t)
		checkRecovers(t, fp, st)
		// The same load for 1 s without stalls: what a busy machine fails
		// on its own (50 ms is short beside a busy CPU), allowed on top.
		control := runLoad(t, fp, st, 25, time.Second, 50*time.Millisecond, 50*time.Millisecond, nil)
		checkCounts(t, fp, control, control.Failed.Load())
		// 500 calls a second; five 80 ms stalls of Redis, 250 calls OK
		// (half a second) apart.
		l := runLoad(t, fp, st, 25, time.Second, 50*time.Millisecond, 50*time.Millisecond, func(l *faultproxy.Load) {
			for range 5 {
				ok := l.OK.Load()
				awaitLoad(t, "250 more calls OK", func() bool { return l.OK.Load() >= ok+250 })
				stall(fp.fx, 80*time.Millisecond)
			}
		})
		t.Logf("%v; without stalls, %v", l, control)
		// At most the calls in flight during a stall fail: those sent
		// from 50 ms (their timeout) before it began to its end, 130 ms
		// of 500 calls a second, five times; plus, over 5 s, five times
		// what the control second failed without stalls. (e2e checks the
		// server's default path.)
		if failed, bound := l.Failed.Load(), 5*130*500/1000+5*control.Failed.Load(); failed > bound {
			t.Errorf("%d of %d calls failed over five 80 ms stalls, want at most the %d in flight during them and %d more as without stalls",
				failed, l.total(), 5*130*500/1000, 5*control.Failed.Load())
		}
		checkCounts(t, fp, l, l.Failed.Load())
	}},
}

// stall freezes Redis' commands for d; a timer ends it.
func stall(fx faulter, d time.Duration) {
	r := fx.Add(&faultproxy.Freeze{Requests: true})
	time.AfterFunc(d, r.Release)
	<-r.Done()
}

// dropFive cuts one connection five times, 1,000 calls OK apart, under 32
// callers: at most 2 % of the calls may fail.
func dropFive(t *testing.T, fp *faultPath, fault func() faultproxy.Fault) {
	st := fp.open(t)
	checkRecovers(t, fp, st)
	l := runLoad(t, fp, st, 32, 500*time.Millisecond, 2*time.Second, 0, func(l *faultproxy.Load) {
		for range 5 {
			ok := l.OK.Load()
			awaitLoad(t, "1,000 more calls OK", func() bool { return l.OK.Load() >= ok+1000 })
			<-fp.fx.Add(fault()).Done()
		}
	})
	t.Logf("%v", l)
	if failed, total := l.Failed.Load(), l.total(); failed*50 > total {
		t.Errorf("%d of %d calls failed over 5 connection drops, want at most 2 %%", failed, total)
	}
	checkCounts(t, fp, l, l.Failed.Load())
	checkRecovers(t, fp, st)
}

// checkRecovers waits (5 s at most) until the store answers again, then
// checks that 20 calls in a row succeed.
func checkRecovers(t *testing.T, fp *faultPath, st limiter.Store) {
	t.Helper()
	op := []limiter.Op{{Key: "faults:recover:{r}:", Algorithm: descriptors.FixedWindow, Limit: faultLimit,
		Window: faultWindow, Cost: 1000}}
	res := make([]limiter.Result, 1)
	err := wait.Until(context.Background(), 5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return st.Take(ctx, op, res)
	})
	if err != nil {
		t.Fatalf("store did not recover: %v", err)
	}
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := st.Take(ctx, op, res)
		cancel()
		if err != nil {
			t.Fatalf("call %d after recovery: %v", i, err)
		}
	}
}
