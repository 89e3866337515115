package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// newSentinelStore returns a store over a client that store.NewClient made
// for s, and a plain failover client to look at the master with.
func newSentinelStore(t testing.TB, s *redistest.Sentinel) (*store.Redis, *redis.Client) {
	t.Helper()
	r := clientStore(t, store.ClientOptions{Type: "Sentinel", URL: s.URL(),
		Conn: store.ConnOptions{PoolSize: 8, DialTimeout: time.Second}})
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName,
		SentinelAddrs: sentinelAddrs(s)})
	t.Cleanup(func() { _ = rdb.Close() })
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
	old := s.Master(t)
	checkFailover(t, "sentinel", r, rdb, "failover:{a}:", old, func() string {
		s.Kill(t, old)
		return s.WaitFailover(t, old)
	})
}
