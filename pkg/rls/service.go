package rls

import (
	"context"
	"errors"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Options configure a Service.
type Options struct {
	// Timeout bounds a decision's store call unless the caller's deadline
	// comes first; 0: the caller's deadline alone.
	Timeout time.Duration
	// OnStoreError answers store failures: OK (FailAllow), OVER_LIMIT
	// (FailDeny) or Unavailable (FailError, the default).
	OnStoreError limiter.FailurePolicy
	// Headers say what an answer carries besides the decision.
	Headers HeaderOptions
	// Observer is told of every decision; nil: none.
	Observer Observer
	// Spans annotates the caller's trace span; nil: none.
	Spans Annotator
}

// Annotator describes decisions in the trace span of ctx. Its methods
// must be cheap and must not keep ctx.
type Annotator interface {
	Decision(ctx context.Context, domain string, descriptors int)
	Decided(ctx context.Context, code string)
}

// Service implements envoy.service.ratelimit.v3.RateLimitService over a
// Limiter. It is safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	limiter *limiter.Limiter
	o       Options
	obs     Observer
	log     *zap.Logger
	// responses pools the limiter's answers, done with once converted.
	responses sync.Pool // *limiter.Response
}

// ShouldRateLimitMethod is ShouldRateLimit's full gRPC method name.
const ShouldRateLimitMethod = rlspb.RateLimitService_ShouldRateLimit_FullMethodName

// Register serves s on g.
func (s *Service) Register(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, s) }

// New returns the service of l; log receives debug lines about decisions.
func New(l *limiter.Limiter, o Options, log *zap.Logger) *Service {
	s := &Service{limiter: l, o: o, obs: o.Observer, log: log}
	if s.obs == nil {
		s.obs = Observers(nil)
	}
	s.responses.New = func() any { return new(limiter.Response) }
	return s
}

// putResponse pools res, without the limits it points to.
func (s *Service) putResponse(res *limiter.Response) {
	clear(res.Statuses)
	s.responses.Put(res)
}

// ShouldRateLimit answers Envoy. Malformed requests get InvalidArgument,
// no rules yet Unknown, store failures Options.OnStoreError's answer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp, err := s.decide(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

func (s *Service) decide(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	if s.o.Spans != nil {
		s.o.Spans.Decision(ctx, req.GetDomain(), len(req.GetDescriptors()))
	}
	if s.limiter.Rules() == nil {
		// xDS rules and a forced start, before the first snapshot.
		s.obs.Failed(req.GetDomain(), limiter.ErrNoRules, time.Since(start))
		return nil, limiter.ErrNoRules
	}
	var buf [inlineDescriptors]limiter.Descriptor[entry]
	lreq := toRequest(req, buf[:0])
	// Envoy's deadline (20ms by default) usually comes first: no timer.
	if s.o.Timeout > 0 && !limiter.DeadlineWithin(ctx, start, s.o.Timeout) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.o.Timeout)
		defer cancel()
	}
	res := s.responses.Get().(*limiter.Response)
	defer s.putResponse(res)
	err := limiter.CheckInto(ctx, s.limiter, &lreq, res)
	if err != nil {
		s.obs.Failed(req.GetDomain(), err, time.Since(start))
		if errors.Is(err, limiter.ErrInvalid) {
			return nil, err
		}
		s.log.Debug("decision failed", zap.String("domain", req.GetDomain()), zap.Error(err))
		return s.onStoreError(len(req.GetDescriptors()), err)
	}
	s.obs.Decided(req.GetDomain(), (*view)(req), res, time.Since(start))
	if s.log.Core().Enabled(zap.DebugLevel) {
		s.logUnmatched(req, res)
	}
	out := toResponse(res)
	h := &s.o.Headers
	if h.ShadowMode && out.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		out.OverallCode = rlspb.RateLimitResponse_OK
		s.obs.GlobalShadowed()
	}
	if h.Mode != HeadersOff || h.DynamicMetadata || h.RequestHeaders {
		h.decorate(out, req, res)
	}
	if s.o.Spans != nil {
		s.o.Spans.Decided(ctx, out.OverallCode.String())
	}
	return out, nil
}

// logUnmatched logs at debug level the descriptors no rule matched.
func (s *Service) logUnmatched(req *rlspb.RateLimitRequest, res *limiter.Response) {
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if st.Limit != nil || st.Replaced || i >= len(req.GetDescriptors()) {
			continue
		}
		s.log.Debug("descriptor matches no rule", zap.String("domain", req.GetDomain()),
			zap.Any("entries", entryStrings(req.GetDescriptors()[i].GetEntries())))
	}
}

// grpcError maps limiter errors to gRPC codes; no rules yet is Unknown, as
// the reference answers.
func grpcError(err error) error {
	switch {
	case errors.Is(err, limiter.ErrNoRules):
		return status.Error(codes.Unknown, err.Error())
	case errors.Is(err, limiter.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Error(codes.Unavailable, "rate-limit store did not answer in time")
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

// onStoreError answers a request whose store call failed, by policy.
func (s *Service) onStoreError(n int, err error) (*rlspb.RateLimitResponse, error) {
	code := rlspb.RateLimitResponse_OK
	switch s.o.OnStoreError {
	case limiter.FailAllow:
	case limiter.FailDeny:
		code = rlspb.RateLimitResponse_OVER_LIMIT
	default:
		return nil, err
	}
	out := &rlspb.RateLimitResponse{OverallCode: code, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, n)}
	for i := range out.Statuses {
		out.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: code}
	}
	return out, nil
}
