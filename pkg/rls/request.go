package rls

import (
	"fmt"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ParseRequest reads a RateLimitRequest given as protojson, as POST /json
// takes it, into the limiter's request with plain entries, for tools that
// look at a request without deciding it (an admin's explain). An error
// says why the body is no RateLimitRequest.
func ParseRequest(body []byte) (*limiter.Request[descriptors.Entry], error) {
	var pb rlspb.RateLimitRequest
	if err := protojson.Unmarshal(body, &pb); err != nil {
		return nil, fmt.Errorf("bad RateLimitRequest: %w", err)
	}
	var buf [inlineDescriptors]limiter.Descriptor[entry]
	req := toRequest(&pb, buf[:0])
	out := &limiter.Request[descriptors.Entry]{Domain: req.Domain, HitsAddend: req.HitsAddend,
		Descriptors: make([]limiter.Descriptor[descriptors.Entry], len(req.Descriptors))}
	for i, d := range req.Descriptors {
		od := &out.Descriptors[i]
		od.Override, od.Hits, od.HasHits, od.Refund = d.Override, d.Hits, d.HasHits, d.Refund
		od.Entries = make([]descriptors.Entry, len(d.Entries))
		for j, e := range d.Entries {
			od.Entries[j] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	return out, nil
}
