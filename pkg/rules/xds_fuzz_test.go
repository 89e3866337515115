package rules_test

import (
	"errors"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/pkg/rules"
)

// FuzzFromXDS proves that no RateLimitConfig (any bytes that decode as
// one) makes FromXDS panic, and that it either compiles a Set or returns
// errors that each name a resource.
func FuzzFromXDS(f *testing.F) {
	for _, c := range []*rlsconf.RateLimitConfig{
		{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", Value: "v*", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}},
			{Key: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "b", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}}},
		}},
		{Name: "q", Domain: "q", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "tokens", QuotaMode: true, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
				"owner": structpb.NewStringValue("ai"), "n": structpb.NewNumberValue(2)}},
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_WEEK, RequestsPerUnit: 9}},
		}},
		{Name: "", Domain: "", Descriptors: []*rlsconf.RateLimitDescriptor{{RateLimit: &rlsconf.RateLimitPolicy{Unit: 9,
			Replaces: []*rlsconf.RateLimitReplace{{}}}}}},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var res []*rlsconf.RateLimitConfig
		for _, data := range [][]byte{a, b} {
			c := &rlsconf.RateLimitConfig{}
			if proto.Unmarshal(data, c) != nil {
				return
			}
			res = append(res, c)
		}
		r, err := rules.FromXDS(res)
		if err == nil {
			if r.Set == nil || r.Hash == "" || len(r.Resources) != 2 {
				t.Fatalf("rules %+v", r)
			}
			return
		}
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var ce *rules.Error
			if !errors.As(e, &ce) || !strings.HasPrefix(ce.File, "resource ") {
				t.Fatalf("error %q does not name a resource", e)
			}
		}
	})
}
