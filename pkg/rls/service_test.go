package rls

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// deadlineStore is a memory store that records the context of each Take
// and its deadline.
type deadlineStore struct {
	*store.Memory
	ctx      context.Context
	deadline time.Time
	has      bool
}

func (s *deadlineStore) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	s.ctx = ctx
	s.deadline, s.has = ctx.Deadline()
	return s.Memory.Take(ctx, ops, results)
}

// TestStoreDeadline checks that the store call is bounded by
// --store-timeout, by a context of the service's only when the caller's
// deadline does not come first.
func TestStoreDeadline(t *testing.T) {
	const timeout = 50 * time.Millisecond
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		caller   time.Duration // 0: no deadline
		want     bool          // whether the store sees a deadline
		callers  bool          // whether it sees the caller's context
		boundsBy time.Duration // the store's deadline is at most this far
	}{
		{"no caller deadline", timeout, 0, true, false, timeout},
		{"caller's deadline first", timeout, 10 * time.Millisecond, true, true, 10 * time.Millisecond},
		{"caller's deadline equal", timeout, timeout, true, true, timeout},
		{"caller's deadline later", timeout, time.Hour, true, false, timeout},
		{"no timeout, no deadline", 0, 0, false, false, 0},
		{"no timeout, caller's deadline", 0, time.Hour, true, true, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &deadlineStore{Memory: store.NewMemory(store.MemoryOptions{})}
			t.Cleanup(func() { _ = st.Close() })
			l := limiter.New(st, limiter.Options{})
			l.SetRules(rs.Set)
			s := New(l, Options{Timeout: tc.timeout}, zaptest.NewLogger(t))
			ctx := context.Background()
			var callers time.Time
			if tc.caller > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.caller)
				defer cancel()
				callers, _ = ctx.Deadline()
			}
			before := time.Now()
			if _, err := s.ShouldRateLimit(ctx, rlsRequest("d", "k", "v")); err != nil {
				t.Fatal(err)
			}
			switch {
			case st.has != tc.want:
				t.Fatalf("store saw a deadline: %v, want %v", st.has, tc.want)
			case !st.has:
			case tc.callers && (st.ctx != ctx || !st.deadline.Equal(callers)):
				t.Fatalf("store deadline %v, want the caller's context and deadline %v", st.deadline, callers)
			case st.deadline.After(time.Now().Add(tc.boundsBy)):
				t.Fatalf("store deadline %v is more than %v away", st.deadline.Sub(before), tc.boundsBy)
			}
		})
	}
}

// toResponseReference is toResponse as first written, one allocation per
// message: the answer the pooled version must give.
func toResponseReference(res *limiter.Response) *rlspb.RateLimitResponse {
	out := &rlspb.RateLimitResponse{OverallCode: toCode(res.Code)}
	for i := range res.Statuses {
		st := &res.Statuses[i]
		ds := &rlspb.RateLimitResponse_DescriptorStatus{Code: toCode(st.Code)}
		switch lim := st.Limit; {
		case lim == nil:
		case lim.Unlimited:
			ds.LimitRemaining = math.MaxUint32
		default:
			ds.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
				Name:            lim.Name,
				RequestsPerUnit: lim.RequestsPerUnit,
				Unit:            rlspb.RateLimitResponse_RateLimit_Unit(lim.Unit),
			}
			ds.LimitRemaining = st.Remaining
			// Whole seconds, rounded up, as the reference answers.
			ds.DurationUntilReset = &durationpb.Duration{Seconds: (st.ResetMillis + 999) / 1000}
		}
		out.Statuses = append(out.Statuses, ds)
	}
	return out
}

func TestToResponse(t *testing.T) {
	named := &descriptors.Limit{Name: "per_ip", Unit: descriptors.Minute, RequestsPerUnit: 600}
	day := &descriptors.Limit{Unit: descriptors.Day, RequestsPerUnit: 1}
	free := &descriptors.Limit{Unlimited: true}
	for _, res := range []*limiter.Response{
		{Statuses: []limiter.Status{}},
		{Statuses: []limiter.Status{{}}},
		{Statuses: []limiter.Status{{Limit: named, Remaining: 599, ResetMillis: 59_001}}},
		{Code: limiter.OverLimit, Statuses: []limiter.Status{
			{Code: limiter.OverLimit, Limit: day, ResetMillis: 86_400_000, RetryAfterMillis: 86_400_000},
			{Limit: free, Remaining: math.MaxUint32},
			{},
			{Limit: named, Remaining: 1, ResetMillis: 1},
			{Limit: named, ResetMillis: math.MaxInt64 / int64(time.Millisecond)},
		}},
	} {
		got, want := toResponse(res), toResponseReference(res)
		if !proto.Equal(got, want) {
			t.Errorf("toResponse(%+v) = %v, want %v", res.Statuses, got, want)
		}
	}
}

// TestResponsesIndependent checks that pooled decisions leave earlier
// answers alone, and that requests of more descriptors than are
// converted in place are answered whole.
func TestResponsesIndependent(t *testing.T) {
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: k, unit: hour, requests_per_unit: 100}\n  - key: free\n    rate_limit: {unlimited: true}\n")})
	if err != nil {
		t.Fatal(err)
	}
	m := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = m.Close() })
	l := limiter.New(m, limiter.Options{})
	l.SetRules(rs.Set)
	s := New(l, Options{}, zaptest.NewLogger(t))
	request := func(n int, key string) *rlspb.RateLimitRequest {
		req := &rlspb.RateLimitRequest{Domain: "d"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, &common.RateLimitDescriptor{
				Entries: []*common.RateLimitDescriptor_Entry{{Key: key, Value: fmt.Sprint(i)}}})
		}
		return req
	}
	ctx := context.Background()
	var answers []*rlspb.RateLimitResponse
	var copies []*rlspb.RateLimitResponse
	for _, req := range []*rlspb.RateLimitRequest{request(3, "k"), request(inlineDescriptors+5, "k"), request(1, "free"), request(2, "none")} {
		resp, err := s.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		answers, copies = append(answers, resp), append(copies, proto.Clone(resp).(*rlspb.RateLimitResponse))
	}
	for i := range answers {
		if !proto.Equal(answers[i], copies[i]) {
			t.Fatalf("answer %d changed after later decisions: %v, was %v", i, answers[i], copies[i])
		}
	}
	if got := answers[0].GetStatuses()[2].GetCurrentLimit().GetName(); got != "k" {
		t.Fatalf("first answer's limit name %q", got)
	}
	if got := answers[2].GetStatuses()[0].GetLimitRemaining(); got != math.MaxUint32 {
		t.Fatalf("unlimited remaining %d", got)
	}
}

// rlsRequest is a request of one descriptor of key=value pairs.
func rlsRequest(domain string, kv ...string) *rlspb.RateLimitRequest {
	d := &common.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*common.RateLimitDescriptor{d}}
}
