package rls_test

import (
	"context"
	"fmt"
	"log"
	"net"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// Serve the RateLimitService of a limiter on the in-memory store, and
// ask it twice for one user allowed one request a minute (a token bucket,
// so that no window boundary falls between the two).
func Example() {
	loaded, err := rules.Parse(map[string][]byte{"api.yaml": []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: token_bucket, burst: 1}
`)})
	if err != nil {
		log.Fatal(err)
	}
	mem := store.NewMemory(store.MemoryOptions{})
	if err := mem.Open(context.Background()); err != nil { // its janitor
		log.Fatal(err)
	}
	defer mem.Close()
	l := limiter.New(mem, limiter.Options{})
	l.SetRules(loaded.Set)

	g := grpc.NewServer(rls.ServerOption())
	rls.New(l, rls.Options{}, zap.NewNop()).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := rlspb.NewRateLimitServiceClient(cc)
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*common.RateLimitDescriptor{{
		Entries: []*common.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}},
	}}}
	for range 2 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.GetOverallCode())
	}
	// Output:
	// OK
	// OVER_LIMIT
}
