package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestRedisClusterJointsApart: on a Cluster, a Take that holds a joint
// (a descriptor's several limits, one hash tag) beside ops of another
// slot is decided in full: the ops of one script call share a slot, or
// the node refuses the call (CROSSSLOT) and Envoy gets no limit.
func TestRedisClusterJointsApart(t *testing.T) {
	c := redistest.StartCluster(t)
	r, _, ctx := openClusterStore(t, c, 30*time.Second)
	op := func(key string, joined bool) limiter.Op {
		return limiter.Op{Key: key, Algorithm: descriptors.FixedWindow, Limit: 1000, Window: 60_000, Cost: 1000, Joined: joined}
	}
	for _, tc := range []struct {
		name string
		ops  func(prefix string) []limiter.Op
	}{
		{"an op beside a joint", func(p string) []limiter.Op {
			return []limiter.Op{op(p+"{a}:k0:", false), op(p+"{b}:k0:", false), op(p+"{b}:k1:", true)}
		}},
		{"a joint beside an op", func(p string) []limiter.Op {
			return []limiter.Op{op(p+"{b}:k0:", false), op(p+"{b}:k1:", true), op(p+"{a}:k0:", false)}
		}},
		{"two joints", func(p string) []limiter.Op {
			return []limiter.Op{op(p+"{a}:k0:", false), op(p+"{a}:k1:", true), op(p+"{b}:k0:", false), op(p+"{b}:k1:", true)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := tc.ops(fmt.Sprintf("jointsapart%d", time.Now().UnixNano()))
			if store.SlotOf(ops[0].Key) == store.SlotOf(ops[len(ops)-1].Key) {
				t.Fatalf("%s and %s share a slot", ops[0].Key, ops[len(ops)-1].Key)
			}
			for _, allowed := range []bool{true, false} { // one request a minute: then none
				res := make([]limiter.Result, len(ops))
				if err := r.Take(ctx, ops, res); err != nil {
					t.Fatalf("Take: %v", err)
				}
				for i := range res {
					if res[i].Allowed != allowed {
						t.Errorf("op %d (%s): allowed %v, want %v", i, ops[i].Key, res[i].Allowed, allowed)
					}
				}
			}
		})
	}
}
