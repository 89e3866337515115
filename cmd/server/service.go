package main

import (
	"context"
	"errors"
	"math"
	"sync"
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
	// responses pools the limiter's answers: a decision is done with its
	// answer once it has built the gRPC response.
	responses sync.Pool // *limiter.Response
}

// observer is told of every decision, for metrics. It must be cheap and
// safe for concurrent use.
type observer interface {
	// Decided is called after a decision with its time taken. It must not
	// keep res, which is reused once it returns.
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
	s := &service{limiter: l, timeout: timeout, obs: obs, resp: resp, log: log}
	s.responses.New = func() any { return new(limiter.Response) }
	return s
}

// putResponse pools res, without the limits it points to.
func (s *service) putResponse(res *limiter.Response) {
	clear(res.Statuses)
	s.responses.Put(res)
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
	if s.limiter.Rules() == nil {
		// Only with rules over xDS and a forced start, before the first
		// snapshot.
		s.obs.Failed(req, errNoRules, time.Since(start))
		return nil, errNoRules
	}
	var buf [inlineDescriptors]limiter.Descriptor[entry]
	lreq := toRequest(req, buf[:0])
	if s.timeout > 0 && !deadlineWithin(ctx, start, s.timeout) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	res := s.responses.Get().(*limiter.Response)
	defer s.putResponse(res)
	err := limiter.CheckInto(ctx, s.limiter, &lreq, res)
	if err != nil {
		s.obs.Failed(req, err, time.Since(start))
		if errors.Is(err, limiter.ErrInvalid) {
			return nil, err
		}
		s.log.Debug("decision failed", zap.String("domain", req.GetDomain()), zap.Error(err))
		return s.onStoreError(len(req.GetDescriptors()), err)
	}
	s.obs.Decided(req, res, time.Since(start))
	if s.log.Core().Enabled(zap.DebugLevel) {
		s.logUnmatched(req, res)
	}
	out := toResponse(res)
	if s.resp.quotaMode {
		quotaAll(out)
	}
	if s.resp.shadowMode && out.OverallCode == rls.RateLimitResponse_OVER_LIMIT {
		out.OverallCode = rls.RateLimitResponse_OK
		s.obs.GlobalShadowed()
	}
	if s.resp.mode != headersOff || s.resp.dynamicMetadata {
		s.resp.decorate(out, res, req.GetDomain(), req.GetDescriptors())
	}
	return out, nil
}

// logUnmatched logs, at debug level, the descriptors of req that no rule
// matched, so that a rule that never applies can be found.
func (s *service) logUnmatched(req *rls.RateLimitRequest, res *limiter.Response) {
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if st.Limit != nil || st.Replaced || i >= len(req.GetDescriptors()) {
			continue
		}
		s.log.Debug("descriptor matches no rule", zap.String("domain", req.GetDomain()),
			zap.Any("entries", entryStrings(req.GetDescriptors()[i].GetEntries())))
	}
}

// quotaAll is global quota mode (QUOTA_MODE): every descriptor over its
// limit answers OK, and so does the request.
func quotaAll(out *rls.RateLimitResponse) {
	for _, st := range out.Statuses {
		if st.Code == rls.RateLimitResponse_OVER_LIMIT {
			st.Code = rls.RateLimitResponse_OK
		}
	}
	out.OverallCode = rls.RateLimitResponse_OK
}

// deadlineWithin reports whether ctx ends at most timeout after start.
// The store call then waits no longer than timeout without a timer of
// ours: Envoy's deadline (20ms by default) comes before the default
// --store-timeout (50ms).
func deadlineWithin(ctx context.Context, start time.Time, timeout time.Duration) bool {
	d, ok := ctx.Deadline()
	return ok && d.Sub(start) <= timeout
}

// errNoRules answers requests before the first rules: the reference's
// message, with its status (Unknown), so that Envoy's failure_mode_deny
// decides.
var errNoRules = errors.New("no rate limit configuration loaded")

// grpcError maps limiter errors to gRPC status codes.
func grpcError(err error) error {
	switch {
	case errors.Is(err, errNoRules):
		return status.Error(codes.Unknown, err.Error())
	case errors.Is(err, limiter.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Error(codes.Unavailable, "rate-limit store did not answer in time")
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

// inlineDescriptors is how many descriptors a request converts without
// allocating: Envoy sends one per rate_limits entry of a route, rarely
// more than a few.
const inlineDescriptors = 8

// toRequest converts req, its descriptors in buf when they fit.
func toRequest(req *rls.RateLimitRequest, buf []limiter.Descriptor[entry]) limiter.Request[entry] {
	var ds []limiter.Descriptor[entry]
	if n := len(req.GetDescriptors()); n <= cap(buf) {
		ds = buf[:n]
		clear(ds)
	} else {
		ds = make([]limiter.Descriptor[entry], n)
	}
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
	blocks := make([]statusBlock, len(res.Statuses))
	for i := range res.Statuses {
		out.Statuses[i] = blocks[i].set(&res.Statuses[i])
	}
	return out
}

// statusBlock holds the messages of one descriptor status, so that a
// response allocates those of all its statuses at once.
type statusBlock struct {
	status rls.RateLimitResponse_DescriptorStatus
	limit  rls.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// set fills b's status from st and returns it.
func (b *statusBlock) set(st *limiter.Status) *rls.RateLimitResponse_DescriptorStatus {
	ds := &b.status
	ds.Code = toCode(st.Code)
	lim := st.Limit
	switch {
	case lim == nil:
	case lim.Unlimited:
		ds.LimitRemaining = math.MaxUint32
	default:
		b.limit.Name = lim.Name
		b.limit.RequestsPerUnit = lim.RequestsPerUnit
		b.limit.Unit = rls.RateLimitResponse_RateLimit_Unit(lim.Unit)
		ds.CurrentLimit = &b.limit
		ds.LimitRemaining = st.Remaining
		// durationpb.New(millis(st.ResetMillis)), in place.
		ns := millis(st.ResetMillis).Nanoseconds()
		b.reset.Seconds, b.reset.Nanos = ns/1e9, int32(ns%1e9)
		ds.DurationUntilReset = &b.reset
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
