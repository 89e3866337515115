package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestReadOnlyClosesConnection: a connection that answers READONLY (a
// master demoted behind an address that now leads to the new one) is
// closed, and the next call dials again, as envoyproxy/ratelimit's
// REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR=true does (#1191): on a pool of
// one connection, the call after the READONLY answer comes on a new
// connection. The call that got READONLY fails; the next succeeds.
func TestReadOnlyClosesConnection(t *testing.T) {
	p := faultproxy.New(t, redistest.Addr(t))
	client, err := store.NewClient(store.ClientOptions{URL: "redis://" + p.Addr(), Conn: store.ConnOptions{PoolSize: 1, MaxConns: 1}})
	if err != nil {
		t.Fatal(err)
	}
	r := store.NewRedis(client, zap.NewNop(), store.RedisOptions{CloseClient: true})
	t.Cleanup(func() { _ = r.Close() })
	base := fmt.Sprintf("readonly:%d:{k}:", time.Now().UnixNano())
	take := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res := make([]limiter.Result, 1)
		return r.Take(ctx, []limiter.Op{{Key: base, Algorithm: descriptors.FixedWindow, Limit: 100 * descriptors.Milli,
			Window: 60_000, Cost: descriptors.Milli}}, res)
	}
	if err := take(); err != nil {
		t.Fatal(err)
	}
	before := p.Stats()
	if before.Open != 1 {
		t.Fatalf("%d connections open, want the pool's one", before.Open)
	}
	rule := p.Add(&faultproxy.ErrorReply{Match: faultproxy.Match{Commands: []string{"EVALSHA"}, Times: 1}, Err: faultproxy.ReadOnlyError})
	if err := take(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("the call answered READONLY: %v", err)
	}
	if rule.Applied() != 1 {
		t.Fatalf("READONLY faked %d times", rule.Applied())
	}
	if err := take(); err != nil {
		t.Fatalf("the call after READONLY: %v", err)
	}
	// The client closed the READONLY connection; the proxy counts it
	// closed once it reads the end, which may come after the next call.
	if err := wait.Until(t.Context(), 10*time.Second, func() error {
		if after := p.Stats(); after.Accepted != before.Accepted+1 || after.Open != 1 {
			return fmt.Errorf("connections accepted %d then %d, open %d: want the READONLY one closed and one more dialled",
				before.Accepted, after.Accepted, after.Open)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
