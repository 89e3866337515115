// Command nullrls is a RateLimitService that answers OK to every
// ShouldRateLimit, one OK status a descriptor, without deciding anything:
// bench/rls measures it beside FastLimit as the floor of the protocol, the
// server CPU a decision costs before any rule, store or observer. Its gRPC
// server has FastLimit's settings (internal/server: window sizes, header
// list, message size, streams, keepalive, codec); it serves /healthcheck,
// and with --pprof-addr net/http/pprof (bench/rls --profile profiles it
// beside FastLimit, so that the two can be compared function by function).
//
//	nullrls --grpc-addr 127.0.0.1:8081 --http-addr 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/fastlimit/fastlimit/pkg/rls"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run serves until SIGINT or SIGTERM; it returns 0 then, 1 when it cannot
// listen, 2 for bad flags.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("nullrls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:8081", "gRPC address")
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "HTTP address of /healthcheck")
	pprofAddr := fs.String("pprof-addr", "", "HTTP address of /debug/pprof (empty: none)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *grpcAddr, *httpAddr, *pprofAddr); err != nil {
		fmt.Fprintln(stderr, "nullrls:", err)
		return 1
	}
	return 0
}

// serve serves gRPC on grpcAddr, /healthcheck on httpAddr and, unless
// pprofAddr is empty, /debug/pprof on it, until ctx ends.
func serve(ctx context.Context, grpcAddr, httpAddr, pprofAddr string) error {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		gl.Close()
		return err
	}
	if pprofAddr != "" {
		pl, err := net.Listen("tcp", pprofAddr)
		if err != nil {
			gl.Close()
			hl.Close()
			return err
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		p := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = p.Serve(pl) }()
		defer p.Close()
	}
	g := grpc.NewServer(serverOptions()...)
	rlspb.RegisterRateLimitServiceServer(g, null{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK") })
	h := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- g.Serve(gl) }()
	go func() { errs <- h.Serve(hl) }()
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	g.Stop()
	_ = h.Close()
	return err
}

// serverOptions are FastLimit's gRPC server options at their defaults
// (internal/server's grpcOptions and grpcBounds.options), less the call
// accounting that is FastLimit's own work.
func serverOptions() []grpc.ServerOption {
	const window = 64 << 10
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(4 << 20),
		rls.ServerOption(),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 24 * time.Hour, MaxConnectionAgeGrace: time.Hour}),
		grpc.MaxConcurrentStreams(1000 + 1),
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.InitialWindowSize(window),
		grpc.InitialConnWindowSize(16 * window),
		grpc.MaxHeaderListSize(64 << 10),
	}
}

// null answers OK to everything.
type null struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (null) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK,
		Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	return resp, nil
}
