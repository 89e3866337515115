package rls

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/tracing"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// benchEdgeRules are examples/envoy/rules/edge.yaml's shapes with limits
// no benchmark reaches: a sliding window per address, a token bucket per
// API key under a plan (the tenant) and one fixed window for everyone.
const benchEdgeRules = `domain: edge
tenant_key: plan
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, algorithm: sliding_window, unit: hour, requests_per_unit: 4000000000}
  - key: plan
    value: free
    descriptors:
      - key: api_key
        rate_limit: {name: free_per_key, algorithm: token_bucket, unit: hour, requests_per_unit: 4000000000}
  - key: generic_key
    value: global
    rate_limit: {name: global, unit: hour, requests_per_unit: 4000000000}
`

// benchMetadataRules are benchEdgeRules with metadata on two rules, which
// dynamic metadata merges.
var benchMetadataRules = strings.NewReplacer(
	"free_per_key, algorithm: token_bucket, unit: hour, requests_per_unit: 4000000000}\n",
	"free_per_key, algorithm: token_bucket, unit: hour, requests_per_unit: 4000000000}\n        metadata: {plan: {name: free, support: community}}\n",
	"{name: global, unit: hour, requests_per_unit: 4000000000}\n",
	"{name: global, unit: hour, requests_per_unit: 4000000000}\n    metadata: {plan: {shared: true}, scope: global}\n",
).Replace(benchEdgeRules)

// benchClients is how many distinct clients (address, API key) the
// benchmark requests cycle through.
const benchClients = 1024

// benchService returns the service as newServer wires it for the memory
// store, with metrics on a fresh registry, the given store timeout and
// --response-headers mode.
func benchService(b *testing.B, timeout time.Duration, headers string) *Service {
	b.Helper()
	return edgeService(b, nil, Options{Timeout: timeout, OnStoreError: limiter.FailError, Headers: HeaderOptions{ResponseHeaders: headers}})
}

// edgeService returns a service with opts on the memory store and the
// rules of benchEdgeRules, observed by metrics on a fresh registry, its
// store traced by tr when tr is not nil.
func edgeService(tb testing.TB, tr *tracing.Tracing, opts Options) *Service {
	tb.Helper()
	r, err := rules.Parse(map[string][]byte{"edge.yaml": []byte(benchEdgeRules)})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	st := store.NewMemory(store.MemoryOptions{})
	tb.Cleanup(func() { _ = st.Close() })
	var ls limiter.Store = st
	if tr != nil {
		ls = tr.Store(st, "memory")
	}
	l := limiter.New(ls, limiter.Options{})
	l.SetRules(r.Set)
	m.Loaded(r, true)
	opts.Observer = m
	return New(l, opts, zap.NewNop())
}

// benchRequests returns benchClients requests as Envoy sends them for
// examples/envoy's "/" route: [remote_address], [plan, api_key] and
// [generic_key=global], or the first n of those descriptors.
func benchRequests(n int) []*rlspb.RateLimitRequest {
	reqs := make([]*rlspb.RateLimitRequest, benchClients)
	for i := range reqs {
		e := func(k, v string) *common.RateLimitDescriptor_Entry {
			return &common.RateLimitDescriptor_Entry{Key: k, Value: v}
		}
		ds := []*common.RateLimitDescriptor{
			{Entries: []*common.RateLimitDescriptor_Entry{e("remote_address", "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256))}},
			{Entries: []*common.RateLimitDescriptor_Entry{e("plan", "free"), e("api_key", "key-"+strconv.Itoa(i))}},
			{Entries: []*common.RateLimitDescriptor_Entry{e("generic_key", "global")}},
		}
		reqs[i] = &rlspb.RateLimitRequest{Domain: "edge", Descriptors: ds[:n]}
	}
	return reqs
}

// BenchmarkShouldRateLimit measures one whole decision as the gRPC
// handler makes it, without the transport: proto to request, matching,
// keys, the memory store, metrics and the response proto. no-timeout is
// the store call as the memory store makes it; store-timeout adds the
// per-request deadline that a Redis store gets (an hour here, so that no
// stall of a busy machine fails the run), for a caller without a
// deadline; envoy-deadline is that with a caller's deadline that comes
// first, as Envoy's (20ms by default) does before --store-timeout's 50ms.
// ietf-headers adds --response-headers=ietf to no-timeout, and
// dynamic-metadata --response-dynamic-metadata.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, n := range []int{1, 3} {
		for _, tc := range []struct {
			name     string
			timeout  time.Duration
			deadline time.Duration
			headers  string
			metadata bool
		}{
			{"no-timeout", 0, 0, HeadersOff, false},
			{"store-timeout", time.Hour, 0, HeadersOff, false},
			{"envoy-deadline", time.Hour, time.Minute, HeadersOff, false},
			{"ietf-headers", 0, 0, HeadersIETF, false},
			{"dynamic-metadata", 0, 0, HeadersOff, true},
		} {
			b.Run(fmt.Sprintf("descriptors=%d/%s", n, tc.name), func(b *testing.B) {
				s := benchService(b, tc.timeout, tc.headers)
				if tc.metadata {
					r, err := rules.Parse(map[string][]byte{"edge.yaml": []byte(benchMetadataRules)})
					if err != nil || r.Set.Limits()[2].Metadata == nil {
						b.Fatalf("metadata rules: %v", err)
					}
					s.limiter.SetRules(r.Set)
					s.o.Headers.DynamicMetadata = true
				}
				reqs := benchRequests(n)
				ctx := context.Background()
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := s.ShouldRateLimit(ctx, reqs[i%benchClients]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
	b.Run("descriptors=3/parallel", func(b *testing.B) {
		s := benchService(b, 0, HeadersOff)
		reqs := benchRequests(3)
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(benchClients)
			for pb.Next() {
				if _, err := s.ShouldRateLimit(ctx, reqs[i%benchClients]); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}
