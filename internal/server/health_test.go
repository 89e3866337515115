package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

func dial(t *testing.T, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func grpcHealth(t *testing.T, conn *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health %q: %v", service, err)
	}
	return resp.GetStatus()
}

// TestHealthWithoutRedis: with Redis down, /healthcheck and gRPC health
// stay OK (the failure policy answers requests); /ready waits for Redis to
// answer once; --health-requires-redis makes them all
// follow Redis.
func TestHealthWithoutRedis(t *testing.T) {
	redis := loopback.Addr(t)
	for _, tc := range []struct {
		name          string
		args          []string
		health, ready int
		grpc          healthpb.HealthCheckResponse_ServingStatus
	}{
		{"default", nil, http.StatusOK, http.StatusServiceUnavailable, healthpb.HealthCheckResponse_SERVING},
		{"active connection", []string{"--health-requires-redis"},
			http.StatusServiceUnavailable, http.StatusServiceUnavailable, healthpb.HealthCheckResponse_NOT_SERVING},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--redis-url", redis, "--redis-dial-timeout", "100ms", "--store-timeout", "100ms"}, tc.args...)
			s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, args...)
			base := "http://" + s.HTTPAddr()
			if code, body := scrape.Get(t, base+"/healthcheck"); code != tc.health {
				t.Errorf("/healthcheck %d %q, want %d", code, body, tc.health)
			}
			if code, body := scrape.Get(t, base+"/ready"); code != tc.ready {
				t.Errorf("/ready %d %q, want %d", code, body, tc.ready)
			}
			conn := dial(t, s.grpcLis.Addr().String())
			for _, svc := range healthServices {
				wait.For(t, 3*probeInterval, func() bool { return grpcHealth(t, conn, svc) == tc.grpc })
			}
		})
	}
}

// TestHealthMemoryStore: with the embedded store every check passes, for
// the service names "" and "ratelimit"; draining fails them all.
func TestHealthMemoryStore(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--health-requires-rules")
	base := "http://" + s.HTTPAddr()
	for _, path := range []string{"/healthcheck", "/ready"} {
		if code, body := scrape.Get(t, base+path); code != http.StatusOK || body != "OK\n" {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	conn := dial(t, s.grpcLis.Addr().String())
	for _, svc := range healthServices {
		if st := grpcHealth(t, conn, svc); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %q: %s", svc, st)
		}
	}
	s.draining.Store(true)
	defer s.draining.Store(false)
	for _, path := range []string{"/healthcheck", "/ready"} {
		if code, _ := scrape.Get(t, base+path); code != http.StatusServiceUnavailable {
			t.Errorf("%s while draining: %d", path, code)
		}
	}
}

// TestReflection lists the services over gRPC reflection, as grpcurl
// does without .proto files.
func TestReflection(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules})
	conn := dial(t, s.grpcLis.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("services %v lack %s", names, want)
		}
	}
}

// TestGRPCMaxConnectionAge: an old connection is sent away, and the
// client's next call dials a new one.
func TestGRPCMaxConnectionAge(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules},
		"--grpc-max-connection-age", "200ms", "--grpc-max-connection-age-grace", "100ms")
	var dials atomic.Int32
	conn := dial(t, s.grpcLis.Addr().String(), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}))
	client := rlspb.NewRateLimitServiceClient(conn)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := client.ShouldRateLimit(ctx, rlsRequest("adm", "free", "x")); err != nil {
			t.Fatal(err)
		}
	}
	call()
	wait.For(t, 5*time.Second, func() bool { call(); return dials.Load() >= 2 })
}

// TestGRPCUnixSocket serves gRPC on a unix socket (GRPC_UDS).
func TestGRPCUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rl.sock")
	testServer(t, map[string]string{"adm.yaml": adminRules}, "--grpc-addr", "unix:"+sock)
	conn := dial(t, "unix:"+sock)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsRequest("adm", "win", "x"))
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("over the unix socket: %v, %v", resp, err)
	}
}

// TestAdminOff turns the admin listener off by name.
func TestAdminOff(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--admin-addr", "off")
	if s.AdminAddr() != "" {
		t.Fatalf("admin listens on %s", s.AdminAddr())
	}
}

// TestUnmatchedLogged: a descriptor no rule matches leaves a debug line.
func TestUnmatchedLogged(t *testing.T) {
	core, logs := zapobserver.New(zapcore.DebugLevel)
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "adm.yaml"), adminRules)
	s := testServerOn(t, dir, zap.New(core))
	conn := dial(t, s.grpcLis.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsRequest("adm", "nokey", "v")); err != nil {
		t.Fatal(err)
	}
	got := logs.FilterMessage("descriptor matches no rule").All()
	if len(got) != 1 || got[0].Level != zapcore.DebugLevel || fmt.Sprint(got[0].ContextMap()["entries"]) != "[nokey=v]" {
		t.Fatalf("log entries %+v", got)
	}
}

// TestQuotaMode: with --quota-mode every descriptor is a quota one, as
// in envoyproxy/ratelimit since #1059: a request is OVER_LIMIT only when
// all its descriptors (but unlimited ones) are over; one over beside one
// that passes (here, one no rule matches) answers OK, its status still
// OVER_LIMIT and named in the dynamic metadata, in quota mode.
func TestQuotaMode(t *testing.T) {
	s, _ := testServer(t, map[string]string{"adm.yaml": adminRules}, "--quota-mode", "--response-dynamic-metadata")
	client := rlspb.NewRateLimitServiceClient(dial(t, s.grpcLis.Addr().String()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	two := rlsRequest("adm", "win", "q")
	two.Descriptors = append(two.Descriptors, rlsRequest("adm", "unmatched", "x").Descriptors...)
	var last *rlspb.RateLimitResponse
	for i := range 6 { // adm.win allows 5 a minute
		resp, err := client.ShouldRateLimit(ctx, two)
		if err != nil {
			t.Fatal(err)
		}
		want := rlspb.RateLimitResponse_OK
		if i == 5 {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || resp.GetStatuses()[0].GetCode() != want {
			t.Fatalf("hit %d: quota mode answered %v", i, resp)
		}
		last = resp
	}
	v := last.GetDynamicMetadata().GetFields()["fastlimit"].GetStructValue().GetFields()["overLimit"].GetListValue().GetValues()
	if len(v) != 1 || v[0].GetStructValue().GetFields()["index"].GetNumberValue() != 0 ||
		!v[0].GetStructValue().GetFields()["quotaMode"].GetBoolValue() {
		t.Errorf("fastlimit.overLimit %v, want descriptor 0 in quota mode", v)
	}
	// Alone, the over descriptor is every quota descriptor of the request.
	resp, err := client.ShouldRateLimit(ctx, rlsRequest("adm", "win", "q"))
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("all quota descriptors over: %v %v, want OVER_LIMIT", resp, err)
	}
}
