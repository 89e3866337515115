package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
	"github.com/fastlimit/fastlimit/internal/edge/httpserver"
	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/supervise"
)

// The descriptors a --rlqs-process child inherits: the listeners its
// parent bound, so that a child started again serves the same addresses.
const (
	childGRPCFD    = 3 // RLQS's gRPC listener, --rlqs-addr
	childMetricsFD = 4 // its /metrics, on a loopback port the parent chose
)

// RLQSChildCommand is the command that runs --rlqs-process's child: the
// server's own arguments follow it.
const RLQSChildCommand = "rlqs-serve"

// rlqsChild is --rlqs-process's parent side: the listeners it bound for
// the child and the supervisor that keeps the child running.
type rlqsChild struct {
	grpcLis, metricsLis net.Listener
	files               []*os.File
	sup                 *supervise.Supervisor
}

// rlqsSplit reports whether RLQS has a listener of its own (--rlqs-addr):
// served by a gRPC server of its own, in this process or the child.
func (s *Server) rlqsSplit() bool { return s.opts.RLQS.Enabled && s.opts.RLQS.Addr != "" }

// inParent reports whether this process starts RLQS's child.
func (s *Server) inParent() bool {
	return s.opts.RLQS.Enabled && s.opts.RLQS.Process && !s.opts.RLQS.Child
}

// listenRLQS binds RLQS's own listener, with --rlqs-addr and RLQS in this
// process; in --rlqs-process's parent it binds the child's listeners
// instead, and registers the child's metrics.
func (s *Server) listenRLQS(cap int) error {
	if !s.rlqsSplit() {
		return nil
	}
	lis, err := listen(s.opts.RLQS.Addr)
	if err != nil {
		return fmt.Errorf("listen rlqs on %s (%s): %w", s.opts.RLQS.Addr, s.opts.Name("rlqs-addr"), err)
	}
	if !s.inParent() {
		s.rlqsLis = s.bounds.listener(connlimit.New(lis, cap))
		return nil
	}
	c := &rlqsChild{grpcLis: lis}
	s.child = c
	if c.metricsLis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return fmt.Errorf("listen for the rlqs process's metrics: %w", err)
	}
	for _, l := range []net.Listener{c.grpcLis, c.metricsLis} {
		f, err := listenerFile(l)
		if err != nil {
			return err
		}
		c.files = append(c.files, f)
	}
	// This executable again, with this process's arguments and
	// environment; nothing starts before startChild.
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("rlqs process: %w", err)
	}
	c.sup = supervise.New(supervise.Options{Path: exe, Args: append([]string{RLQSChildCommand}, os.Args[1:]...), Files: c.files,
		Log: s.log.Named("rlqs-process"), Pause: 100 * time.Millisecond, MaxPause: 10 * time.Second})
	restarts := func() float64 { return float64(c.sup.Restarts()) }
	if err := metrics.RegisterRLQSProcess(s.registry, restarts, "http://"+c.metricsLis.Addr().String()+"/metrics",
		s.log.Named("rlqs-process")); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// listenerFile is a listener's descriptor, to hand to a child.
func listenerFile(l net.Listener) (*os.File, error) {
	fl, ok := l.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, fmt.Errorf("a %T cannot be handed to a child process", l)
	}
	f, err := fl.File()
	if err != nil {
		return nil, fmt.Errorf("hand %s to the rlqs process: %w", l.Addr(), err)
	}
	return f, nil
}

// startChild starts --rlqs-process's child; it serves the listeners the
// parent bound and is started again whenever it exits, until Close.
func (s *Server) startChild() error {
	c := s.child
	if c == nil {
		return nil
	}
	if err := c.sup.Start(); err != nil {
		return err
	}
	s.log.Info("rlqs process started", zap.Int("pid", c.sup.PID()), zap.String("rlqs", c.grpcLis.Addr().String()),
		zap.Int("nice", s.opts.RLQS.Nice))
	return nil
}

// stopChild stops the child gently (it ends its streams, so that Envoys
// move to another replica) and closes the listeners it served.
func (s *Server) stopChild(ctx context.Context) error {
	c := s.child
	if c == nil {
		return nil
	}
	var err error
	if c.sup != nil {
		err = c.sup.Stop(ctx, 2*stepTimeout)
	}
	for _, f := range c.files {
		_ = f.Close()
	}
	// Open may have failed before binding them all.
	for _, l := range []net.Listener{c.grpcLis, c.metricsLis} {
		if l != nil {
			err = errors.Join(err, l.Close())
		}
	}
	return err
}

// openChildListeners takes, in the child, the listeners its parent
// passed: RLQS's gRPC listener and the one its metrics are read on.
func (s *Server) openChildListeners(cap int) error {
	lis, err := net.FileListener(os.NewFile(childGRPCFD, "rlqs"))
	if err != nil {
		return fmt.Errorf("the rlqs listener from the parent (descriptor %d): %w", childGRPCFD, err)
	}
	s.rlqsLis = s.bounds.listener(connlimit.New(lis, cap))
	ml, err := net.FileListener(os.NewFile(childMetricsFD, "rlqs-metrics"))
	if err != nil {
		return fmt.Errorf("the metrics listener from the parent (descriptor %d): %w", childMetricsFD, err)
	}
	s.serveMetrics(httpserver.New(ml, s.metricsMux(), s.httpOpts))
	return nil
}

// RLQSAddr is RLQS's own bound address (--rlqs-addr), "" without one.
func (s *Server) RLQSAddr() string {
	switch {
	case s.child != nil:
		return s.child.grpcLis.Addr().String()
	case s.rlqsLis != nil:
		return s.rlqsLis.Addr().String()
	}
	return ""
}

// openChild is Open in --rlqs-process's child: with the rules loaded, it
// serves RLQS on the listeners its parent passed, and nothing else.
// RateLimitService's store is not opened: RLQS's demand exchanges have
// their own client.
func (s *Server) openChild(ctx context.Context) error {
	s.life, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.tracing.Open(s.life); err != nil {
		return err
	}
	// Its one HTTP listener, the metrics', is capped as the parent's are.
	grpcCap, err := grpcConnCap(s.opts, s.files, s.httpOpts.MaxConns)
	if err != nil {
		return fmt.Errorf("%s: %w", s.opts.Name("grpc-max-connections"), err)
	}
	if err := s.openChildListeners(grpcCap); err != nil {
		return err
	}
	s.serving.Store(true)
	s.serveGRPC(s.rlqsGRPC, s.rlqsLis)
	s.setHealth(true)
	s.log.Info("serving rlqs", zap.String("rlqs", s.RLQSAddr()), zap.String("version", s.version), zap.Int("pid", os.Getpid()))
	return nil
}
