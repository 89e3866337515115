package rlqs

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// ErrClosed ends the streams of a closing service.
var ErrClosed = errors.New("rlqs: service closing")

// Service implements envoy.service.rate_limit_quota.v3.RateLimitQuotaService.
// It is safe for concurrent use. New starts nothing; the gRPC server runs
// a handler per stream; Close ends them.
type Service struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	opts     Options
	ttl      int64 // assignments' time to live, in seconds
	log      *zap.Logger
	resolver resolver
	obs      Observer

	mu        sync.Mutex
	divisions map[string]*division
	streams   map[*stream]struct{}
	closing   bool

	seq       atomic.Uint64
	storeDown atomic.Bool // the last exchange failed
	handlers  sync.WaitGroup
}

// New returns a Service. It fails on invalid options.
func New(opts Options) (*Service, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	s := &Service{
		opts:      opts,
		ttl:       quota.TTL(opts.ReportPeriod, opts.TTLPeriods),
		log:       opts.Log.Named("rlqs"),
		resolver:  resolver{prefix: opts.KeyPrefix, unmatched: opts.Unmatched},
		obs:       opts.Observer,
		divisions: map[string]*division{},
		streams:   map[*stream]struct{}{},
	}
	return s, nil
}

// Register registers the service on a gRPC server.
func (s *Service) Register(g *grpc.Server) {
	rlqspb.RegisterRateLimitQuotaServiceServer(g, s)
}

// StreamRateLimitQuotas serves one Envoy's stream until it ends or the
// service closes; a report of another domain ends it: InvalidArgument.
func (s *Service) StreamRateLimitQuotas(srv grpcStream) error {
	ctx, cancel := context.WithCancelCause(srv.Context())
	defer cancel(nil)
	st, err := s.open(srv, cancel)
	if err != nil {
		return err
	}
	defer s.closeStream(st)
	msgs := make(chan *rlqspb.RateLimitQuotaUsageReports)
	go func() {
		for {
			m, err := srv.Recv()
			if err != nil {
				cancel(err)
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return streamEnd(context.Cause(ctx))
		case m := <-msgs:
			if err := st.handle(ctx, m); err != nil {
				return err
			}
		case <-st.wake:
		}
		if err := st.flush(); err != nil {
			return streamEnd(err)
		}
	}
}

// streamEnd is the status a stream ends with after err.
func streamEnd(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	}
	return err
}

func (s *Service) open(srv grpcStream, cancel func(error)) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, status.Error(codes.Unavailable, ErrClosed.Error())
	}
	st := newStream(s, strconv.FormatUint(s.seq.Add(1), 36), srv, cancel)
	s.streams[st] = struct{}{}
	s.handlers.Add(1)
	return st, nil
}

// closeStream forgets a stream: its clients leave their divisions, and
// their demand is deleted, so that other replicas stop counting it.
func (s *Service) closeStream(st *stream) {
	defer s.handlers.Done()
	s.mu.Lock()
	delete(s.streams, st)
	s.mu.Unlock()
	var items []quota.Item
	for _, b := range st.snapshot() {
		if b.div != nil {
			items = append(items, s.leave(b))
		}
	}
	s.deleteDemand(items)
}

// leave takes b's client out of its division; the item deletes its demand.
func (s *Service) leave(b *envoyBucket) quota.Item {
	dv := b.div
	dv.leave(b)
	s.release(dv)
	b.div = nil
	return quota.Item{Key: dv.key, Demand: quota.Demand{Replica: s.opts.Replica, Client: b.client}, Op: quota.Delete}
}

// deleteDemand deletes clients' demand; on a failure it expires instead.
func (s *Service) deleteDemand(items []quota.Item) {
	if s.opts.Store == nil || len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StoreTimeout)
	defer cancel()
	if _, err := s.opts.Store.Exchange(ctx, items, s.opts.Division.Stale, s.storeNow(s.opts.Now())); err != nil {
		s.obs.StoreFailed()
		s.log.Debug("deleting demand failed; it expires instead", zap.Error(err))
	}
}

// Close ends every stream with Unavailable (Envoy reopens its stream at
// its next report, on another replica) and refuses new ones. It waits
// for the handlers to return, as long as ctx allows.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for st := range s.streams {
		st.cancel(ErrClosed)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
