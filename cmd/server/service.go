package main

import (
	"context"
	"errors"
	"math"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

type entry = *common.RateLimitDescriptor_Entry

// service implements envoy.service.ratelimit.v3.RateLimitService over a
// Limiter: it converts Envoy's protos to limiter requests and back.
type service struct {
	rls.UnimplementedRateLimitServiceServer
	limiter *limiter.Limiter
	timeout time.Duration // bound on one decision's store call
	obs     observer
	resp    headerOptions
	onError string // failure policy: allow, deny or error
	log     *zap.Logger
}

// observer is told of every decision, for metrics. It must be cheap and
// safe for concurrent use.
type observer interface {
	// Decided is called after a decision with its time taken.
	Decided(req *rls.RateLimitRequest, res *limiter.Response, took time.Duration)
	// Failed is called when a request fails (invalid, or store failure).
	Failed(req *rls.RateLimitRequest, err error, took time.Duration)
	// GlobalShadowed is called when --shadow-mode answers OK to a request
	// that is over limit.
	GlobalShadowed()
}

type nopObserver struct{}

func (nopObserver) Decided(*rls.RateLimitRequest, *limiter.Response, time.Duration) {}
func (nopObserver) Failed(*rls.RateLimitRequest, error, time.Duration)              {}
func (nopObserver) GlobalShadowed()                                                 {}

func newService(l *limiter.Limiter, timeout time.Duration, obs observer, resp headerOptions, log *zap.Logger) *service {
	if obs == nil {
		obs = nopObserver{}
	}
	return &service{limiter: l, timeout: timeout, obs: obs, resp: resp, log: log}
}

// ShouldRateLimit answers Envoy. Malformed requests get InvalidArgument;
// store failures get Unavailable so that Envoy's failure_mode_deny decides.
func (s *service) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	resp, err := s.decide(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

func (s *service) decide(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	start := time.Now()
	lreq := toRequest(req)
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	res, err := limiter.Check(ctx, s.limiter, &lreq)
	if err != nil {
		s.obs.Failed(req, err, time.Since(start))
		if errors.Is(err, limiter.ErrInvalid) {
			return nil, err
		}
		s.log.Debug("decision failed", zap.String("domain", req.GetDomain()), zap.Error(err))
		return s.onStoreError(len(req.GetDescriptors()), err)
	}
	s.obs.Decided(req, res, time.Since(start))
	out := toResponse(res)
	if s.resp.shadowMode && out.OverallCode == rls.RateLimitResponse_OVER_LIMIT {
		out.OverallCode = rls.RateLimitResponse_OK
		s.obs.GlobalShadowed()
	}
	if s.resp.mode != headersOff || s.resp.dynamicMetadata {
		s.resp.decorate(out, res, req.GetDomain(), requestEntries(req))
	}
	return out, nil
}

// grpcError maps limiter errors to gRPC status codes.
func grpcError(err error) error {
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Error(codes.Unavailable, "rate-limit store did not answer in time")
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

func toRequest(req *rls.RateLimitRequest) limiter.Request[entry] {
	ds := make([]limiter.Descriptor[entry], len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		ds[i].Entries = d.GetEntries()
		if o := d.GetLimit(); o != nil {
			ds[i].Override = &limiter.Override{
				RequestsPerUnit: o.GetRequestsPerUnit(),
				Unit:            descriptors.Unit(o.GetUnit()),
			}
		}
		if h := d.GetHitsAddend(); h != nil {
			ds[i].Hits, ds[i].HasHits = h.GetValue(), true
		}
	}
	return limiter.Request[entry]{Domain: req.GetDomain(), Descriptors: ds, HitsAddend: req.GetHitsAddend()}
}

func toResponse(res *limiter.Response) *rls.RateLimitResponse {
	out := &rls.RateLimitResponse{
		OverallCode: toCode(res.Code),
		Statuses:    make([]*rls.RateLimitResponse_DescriptorStatus, len(res.Statuses)),
	}
	for i := range res.Statuses {
		out.Statuses[i] = toStatus(&res.Statuses[i])
	}
	return out
}

func toStatus(st *limiter.Status) *rls.RateLimitResponse_DescriptorStatus {
	ds := &rls.RateLimitResponse_DescriptorStatus{Code: toCode(st.Code)}
	lim := st.Limit
	switch {
	case lim == nil:
	case lim.Unlimited:
		ds.LimitRemaining = math.MaxUint32
	default:
		ds.CurrentLimit = &rls.RateLimitResponse_RateLimit{
			Name:            lim.Name,
			RequestsPerUnit: lim.RequestsPerUnit,
			Unit:            rls.RateLimitResponse_RateLimit_Unit(lim.Unit),
		}
		ds.LimitRemaining = st.Remaining
		ds.DurationUntilReset = durationpb.New(millis(st.ResetMillis))
	}
	return ds
}

func toCode(c limiter.Code) rls.RateLimitResponse_Code {
	if c == limiter.OverLimit {
		return rls.RateLimitResponse_OVER_LIMIT
	}
	return rls.RateLimitResponse_OK
}

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func requestEntries(req *rls.RateLimitRequest) [][]entry {
	out := make([][]entry, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		out[i] = d.GetEntries()
	}
	return out
}

// onStoreError answers a request whose store call failed, by policy.
func (s *service) onStoreError(n int, err error) (*rls.RateLimitResponse, error) {
	code := rls.RateLimitResponse_OK
	switch s.onError {
	case policyAllow:
	case policyDeny:
		code = rls.RateLimitResponse_OVER_LIMIT
	default:
		return nil, err
	}
	out := &rls.RateLimitResponse{OverallCode: code, Statuses: make([]*rls.RateLimitResponse_DescriptorStatus, n)}
	for i := range out.Statuses {
		out.Statuses[i] = &rls.RateLimitResponse_DescriptorStatus{Code: code}
	}
	return out, nil
}
