package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// newSentinelStore returns a store over a client that store.NewClient made
// for s, and a plain failover client to look at the master with.
func newSentinelStore(t testing.TB, s *redistest.Sentinel) (*store.Redis, *redis.Client) {
	t.Helper()
	client, err := store.NewClient(store.ClientOptions{Type: "Sentinel", URL: s.URL(),
		Conn: store.ConnOptions{PoolSize: 8, DialTimeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	r := store.NewRedis(client, zaptest.NewLogger(t), store.RedisOptions{CloseClient: true})
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName,
		SentinelAddrs: sentinelAddrs(s)})
	t.Cleanup(func() { _ = r.Close(); _ = rdb.Close() })
	return r, rdb
}

func sentinelAddrs(s *redistest.Sentinel) []string {
	return strings.Split(s.URL(), ",")[1:]
}

func TestRedisSentinelConformance(t *testing.T) {
	s := redistest.StartSentinel(t)
	r, rdb := newSentinelStore(t, s)
	limitertest.Run(t, func(t *testing.T) limiter.Store { return inspected{r, rdb} })
}

// TestRedisSentinelFailover kills the master under load: decisions fail
// until the sentinels promote a replica and the client follows, then flow
// again, and no op is counted twice.
func TestRedisSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	r, rdb := newSentinelStore(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.Open(ctx); err != nil {
		t.Fatal(err)
	}
	load := newFailoverLoad(r, "failover:{a}:")
	old := s.Master(t)
	stop := make(chan struct{})
	wg := load.run(4, stop)
	time.Sleep(time.Second)
	load.kill(func() { s.Kill(t, old) })
	newMaster := s.WaitFailover(t, old)
	t.Logf("sentinel: %s took over from %s %v after the kill", newMaster, old, time.Since(load.killAt).Round(time.Millisecond))
	recovered := load.waitRecovered(30*time.Second, time.Second)
	close(stop)
	wg.Wait()
	if !recovered {
		t.Fatalf("decisions did not flow again within 30 s of the kill")
	}
	final, err := rdb.Get(ctx, load.counterKey()).Int64()
	if err != nil {
		t.Fatalf("read counter: %v", err)
	}
	load.report(t, "sentinel", final/1000, 15*time.Second)
}
