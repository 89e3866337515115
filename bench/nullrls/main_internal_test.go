package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestServe answers OK, one status a descriptor, /healthcheck 200 and
// /debug/pprof/ 200, until its context ends.
func TestServe(t *testing.T) {
	grpcAddr, httpAddr, pprofAddr := loopback.Addr(t), loopback.Addr(t), loopback.Addr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, grpcAddr, httpAddr, pprofAddr) }()
	err := wait.Until(ctx, 10*time.Second, func() error {
		resp, err := http.Get("http://" + httpAddr + "/healthcheck")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: make([]*common.RateLimitDescriptor, 3)}
	for i := range req.Descriptors {
		req.Descriptors[i] = &common.RateLimitDescriptor{}
	}
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlspb.RateLimitResponse_OK || len(resp.Statuses) != 3 || resp.Statuses[2].Code != rlspb.RateLimitResponse_OK {
		t.Errorf("response %v, want OK with three OK statuses", resp)
	}
	pr, err := http.Get("http://" + pprofAddr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	pr.Body.Close()
	if pr.StatusCode != http.StatusOK {
		t.Errorf("/debug/pprof/: %s", pr.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}
