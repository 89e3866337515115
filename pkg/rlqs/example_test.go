package rlqs_test

import (
	"context"
	"fmt"
	"log"
	"net"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

const checkoutRules = `
domain: api
descriptors:
  - {key: name, rate_limit: {unit: minute, requests_per_unit: 600}}
`

// Serve the Rate Limit Quota Service with demand shared in process, and
// subscribe to one bucket as an Envoy's first usage report does: the only
// Envoy is assigned the whole limit, 600 requests a minute, as a token
// bucket.
func Example() {
	loaded, err := rules.Parse(map[string][]byte{"checkout.yaml": []byte(checkoutRules)})
	if err != nil {
		log.Fatal(err)
	}
	svc, err := rlqs.New(rlqs.Options{
		Rules: func() *descriptors.Set { return loaded.Set }, // or a Limiter's Rules
		Store: demand.NewMemory(nil),
	})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	svc.Register(g)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	defer func() { _ = svc.Close(context.Background()) }() // ends the streams first

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	err = stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "api",
		BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"name": "checkout"}},
		}}})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range resp.GetBucketAction() {
		tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
		fmt.Printf("%v: %d tokens every %ds, at most %d\n", a.GetBucketId().GetBucket(),
			tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().GetSeconds(), tb.GetMaxTokens())
	}
	// Output:
	// map[name:checkout]: 100 tokens every 10s, at most 600
}
