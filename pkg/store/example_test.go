package store_test

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// The memory store decides ops on its own: here a fixed window of 2
// requests a second, at explicit times (Now, in Unix ms), 1000
// milli-requests a hit.
func ExampleNewMemory() {
	mem := store.NewMemory(store.MemoryOptions{})
	defer mem.Close()
	op := limiter.Op{Key: "example:{api/api_key=alice}:default:", Algorithm: descriptors.FixedWindow,
		Limit: 2 * descriptors.Milli, Window: 1000, Cost: descriptors.Milli}
	for _, at := range []int64{1_700_000_000_000, 1_700_000_000_200, 1_700_000_000_400, 1_700_000_001_000} {
		op.Now = at
		var res [1]limiter.Result
		if err := mem.Take(context.Background(), []limiter.Op{op}, res[:]); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("at +%dms: allowed %v, remaining %d\n", at-1_700_000_000_000, res[0].Allowed, res[0].Remaining/descriptors.Milli)
	}
	// Output:
	// at +0ms: allowed true, remaining 1
	// at +200ms: allowed true, remaining 0
	// at +400ms: allowed false, remaining 0
	// at +1000ms: allowed true, remaining 1
}

// NewClient builds the go-redis client of a deployment, in the formats of
// envoyproxy/ratelimit's REDIS_TYPE and REDIS_URL; neither it nor NewRedis
// does I/O. String names the deployment for logs, without its password.
func ExampleNewClient() {
	for _, o := range []store.ClientOptions{
		{URL: "redis://app:secret@cache:6379/0"},
		{Type: store.TypeCluster, URL: "redis-0:6379,redis-1:6379,redis-2:6379"},
		{Type: store.TypeSentinel, URL: "mymaster,sentinel-0:26379,sentinel-1:26379", Password: "secret"},
	} {
		client, err := store.NewClient(o)
		if err != nil {
			fmt.Println(err)
			continue
		}
		r := store.NewRedis(client, zap.NewNop(), store.RedisOptions{CloseClient: true})
		fmt.Println(o)
		_ = r.Close()
	}
	// Output:
	// single redis://app:xxxxx@cache:6379/0
	// cluster redis-0:6379,redis-1:6379,redis-2:6379
	// sentinel mymaster,sentinel-0:26379,sentinel-1:26379
}

// A limiter on a Redis server: every replica that shares the server shares
// the limits. This example needs a Redis at localhost:6379, so go test only
// compiles it.
func ExampleRedis() {
	client, err := store.NewClient(store.ClientOptions{
		URL:  "redis://localhost:6379/0",
		Conn: store.ConnOptions{PoolSize: 16, DialTimeout: time.Second},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := store.NewRedis(client, zap.NewNop(), store.RedisOptions{CloseClient: true})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.Open(ctx); err != nil { // optional: checks Redis and loads the scripts
		fmt.Println(err)
		return
	}

	set, err := descriptors.NewSet([]descriptors.DomainConfig{{
		Name: "api",
		Descriptors: []descriptors.Descriptor{{
			Key:   "api_key",
			Limit: &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 100},
		}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	lim := limiter.New(r, limiter.Options{KeyPrefix: "example"})
	lim.SetRules(set)
	resp, err := limiter.Check(ctx, lim, &limiter.Request[descriptors.Entry]{
		Domain: "api",
		Descriptors: []limiter.Descriptor[descriptors.Entry]{{
			Entries: []descriptors.Entry{{Key: "api_key", Value: "alice"}},
		}},
	})
	if err != nil { // wraps limiter.ErrUnavailable when Redis fails
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Code, resp.Statuses[0].Remaining)
}
