package faultproxy_test

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	fp "github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestSetCluster: a cluster client that starts from proxies reaches
// every node through proxies only (CLUSTER SLOTS and MOVED carry proxy
// addresses), and the set's faults apply on every node.
func TestSetCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	g := fp.NewSet(t, c.Addrs()[0]) // one seed; the others are discovered
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{g.Addr(c.Addrs()[0])},
		MaxRetries: -1, DialTimeout: ioTimeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout})
	t.Cleanup(func() { _ = client.Close() })
	const n = 60
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key(t)
		if err := client.Set(ctx(t), keys[i], i, 0).Err(); err != nil {
			t.Fatalf("SET %d: %v", i, err)
		}
	}
	if got := g.Stats().Commands["SET"]; got != n {
		t.Errorf("%d SETs went through proxies, want %d", got, n)
	}
	proxies := g.Upstreams()
	for _, addr := range c.Addrs() {
		if proxies[addr] == "" {
			t.Errorf("no proxy for node %s: %v", addr, proxies)
		}
	}
	slots, err := client.ClusterSlots(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		for _, node := range s.Nodes {
			if !slices.Contains(slices.Collect(maps.Values(proxies)), node.Addr) {
				t.Errorf("the client sees node %s, not a proxy", node.Addr)
			}
		}
	}

	t.Run("MOVED", func(t *testing.T) {
		k := keys[0]
		master := c.MasterOf(t, k)
		var other string
		for _, a := range c.Addrs() {
			if a != master {
				other = a
				break
			}
		}
		moved := dialRaw(t, g.Addr(other)).do("GET", k)
		if moved.Kind != fp.KindError || !strings.HasSuffix(moved.Str, " "+g.Addr(master)) {
			t.Errorf("GET on another node = %v, want MOVED to %s (the master's proxy)", moved, g.Addr(master))
		}
	})
	// A set fault counts across nodes. go-redis' cluster client gives
	// an OOM to its caller, but retries a READONLY (after reloading the
	// slot map) on its own.
	for _, tc := range []struct {
		err    string
		failed int
	}{
		{fp.OOMError, 1},
		{fp.ReadOnlyError, 0},
	} {
		t.Run("fault on any node, "+strings.Fields(tc.err)[0], func(t *testing.T) {
			before := g.Stats()
			rule := g.Add(&fp.ErrorReply{Match: fp.Nth(3, "GET"), Err: tc.err})
			defer rule.Release()
			failed := 0
			for i, k := range keys[:10] {
				v, err := client.Get(ctx(t), k).Result()
				switch {
				case err != nil && err.Error() == tc.err:
					failed++
				case err != nil || v != strconv.Itoa(i):
					t.Errorf("GET %s = %q, %v", k, v, err)
				}
			}
			after := g.Stats()
			if failed != tc.failed || rule.Applied() != 1 || after.Faked-before.Faked != 1 {
				t.Errorf("%d GETs failed, rule applied %d times; want %d and 1", failed, rule.Applied(), tc.failed)
			}
			if n := after.Commands["GET"] - before.Commands["GET"]; n != int64(10-tc.failed) {
				t.Errorf("Redis saw %d GETs, want %d", n, 10-tc.failed)
			}
		})
	}
	t.Run("CutAll", func(t *testing.T) {
		g.CutAll(0)
		wait.For(t, ioTimeout, func() bool {
			return client.Get(ctx(t), keys[1]).Err() == nil
		})
		for i, k := range keys {
			if v, err := client.Get(ctx(t), k).Result(); err != nil || v != strconv.Itoa(i) {
				t.Fatalf("GET %s after CutAll = %q, %v", k, v, err)
			}
		}
	})
}

// TestSetSentinel: a failover client that knows only the sentinels'
// proxies reaches the master, and after a failover the new master,
// through proxies (the sentinels' replies and +switch-master carry proxy
// addresses).
func TestSetSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	sentinels := strings.Split(s.URL(), ",")[1:]
	g := fp.NewSet(t, sentinels...)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName,
		SentinelAddrs: g.Addrs(sentinels...), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = client.Close() })
	k := key(t)
	if err := client.Set(ctx(t), k, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	master := s.Master(t)
	if g.Upstreams()[master] == "" {
		t.Fatalf("no proxy for the master %s: %v", master, g.Upstreams())
	}
	if n := g.Proxy(master).Forwarded("SET"); n != 1 {
		t.Errorf("the master's proxy forwarded %d SETs, want 1", n)
	}

	s.Kill(t, master)
	promoted := s.WaitFailover(t, master)
	ok := 0
	if !wait.True(3*ioTimeout, func() bool {
		if client.Set(ctx(t), k, "2", 0).Err() == nil {
			ok++
		}
		return ok >= 5
	}) {
		t.Fatalf("the client did not follow the failover to %s", promoted)
	}
	if g.Upstreams()[promoted] == "" {
		t.Fatalf("no proxy for the new master %s: %v", promoted, g.Upstreams())
	}
	if n := g.Proxy(promoted).Forwarded("SET"); n < 5 {
		t.Errorf("the new master's proxy forwarded %d SETs, want at least 5", n)
	}
	if n := g.Stats().Commands["SET"]; n < 6 {
		t.Errorf("%d SETs through proxies, want at least 6", n)
	}
}
