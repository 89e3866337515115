package server

import (
	"context"
	"math"
	"strings"
	"testing"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestHugeHitsAddend sends descriptor hits_addend 2^63 twice and 2^64-1
// once, on a plain rule and a detailed_metric one: the limiter answers
// OVER_LIMIT (its charge saturates), and each decision counts 2^32 hits,
// so that the counters stay exact and never wrap.
func TestHugeHitsAddend(t *testing.T) {
	s, _ := testServer(t, map[string]string{"huge.yaml": `domain: huge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`}, "--drain", "0s")
	for _, c := range []struct{ key, rule string }{{"k", "huge.k"}, {"user", "huge.user_alice"}} {
		for _, hits := range []uint64{1 << 63, 1 << 63, math.MaxUint64} {
			d := &common.RateLimitDescriptor{Entries: []*common.RateLimitDescriptor_Entry{{Key: c.key, Value: "alice"}},
				HitsAddend: wrapperspb.UInt64(hits)}
			resp, err := s.service.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "huge",
				Descriptors: []*common.RateLimitDescriptor{d}})
			if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("%s hits_addend %d: %v, %v; want OVER_LIMIT", c.key, hits, resp, err)
			}
		}
		for _, name := range []string{"fastlimit_rule_total_hits_total", "fastlimit_rule_over_limit_total"} {
			if got := metricValue(t, s.registry, name, "domain", "huge", "rule", c.rule); got != 3<<32 {
				t.Errorf("%s %s: counted %v hits, want 3 x 2^32", name, c.rule, got)
			}
		}
	}
}

// TestStoreNameHidesPassword: the name logged for the store shows the
// deployment but no password.
func TestStoreNameHidesPassword(t *testing.T) {
	for _, args := range [][]string{
		{"--redis-url", "redis://app:hunter2@h:1/0"},
		{"--redis-type", "cluster", "--redis-url", "a:1,b:2", "--redis-password", "hunter2"},
		{"--redis-type", "sentinel", "--redis-url", "m,s:1", "--redis-auth", "u:hunter2"},
	} {
		o := parseSettings(t, args, func(string) string { return "" })
		name := storeName(o)
		if strings.Contains(name, "hunter2") || !strings.HasPrefix(name, "redis ") {
			t.Errorf("storeName(%q) = %q", args, name)
		}
		if _, err := newStore(o, zap.NewNop()); err != nil {
			t.Errorf("newStore(%q) = %v", args, err)
		}
	}
}
