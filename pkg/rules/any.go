package rules

import (
	"fmt"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// XDSTypeURL is the type of the xDS resources rules come in.
const XDSTypeURL = resource.RateLimitConfigType

// FromAny unpacks the resources of an xDS snapshot and compiles them as
// FromXDS does; a resource of another type is an error naming it.
func FromAny(res []*anypb.Any) (*Loaded, error) {
	return FromAnyWith(res, nil)
}

// FromAnyWith is FromAny with the extensions of ov (FromXDSWith).
func FromAnyWith(res []*anypb.Any, ov *Overlay) (*Loaded, error) {
	cfgs := make([]*rlsconf.RateLimitConfig, len(res))
	for i, a := range res {
		cfgs[i] = &rlsconf.RateLimitConfig{}
		if err := a.UnmarshalTo(cfgs[i]); err != nil {
			return nil, fmt.Errorf("resource #%d (%s): %w", i, a.GetTypeUrl(), err)
		}
	}
	return FromXDSWith(cfgs, ov)
}
