package rules_test

import (
	"errors"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/fastlimit/fastlimit/pkg/rules"
)

// FuzzOverlay proves that no overlay makes the parser or FromXDSWith
// panic, and that a refused one gets positioned errors of its file.
func FuzzOverlay(f *testing.F) {
	for _, s := range []string{
		egOverlay,
		"domains: []\n",
		"domains:\n  - domain: default/eg/http\n    atomic: true\n    tenant_key: t\n",
		"domains:\n  - domain: d\n    descriptors:\n      - {key: k, value: '*', share_threshold: true, rate_limit: {cost: 0.5}}\n",
		"domains:\n  - &d {domain: x}\n  - *d\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ov, err := rules.ParseOverlay("o.yaml", data)
		if err != nil {
			for _, e := range unjoin(err) {
				var ce *rules.Error
				if !errors.As(e, &ce) || ce.File != "o.yaml" || ce.Line < 0 || ce.Msg == "" {
					t.Fatalf("error %q is not a positioned *rules.Error", e)
				}
			}
			return
		}
		r, err := rules.FromXDSWith([]*rlsconf.RateLimitConfig{egSnapshot(3)}, ov)
		if err == nil && (r == nil || r.Set == nil || r.OverlayUnmatched > len(r.Warnings)) {
			t.Fatalf("FromXDSWith = %+v", r)
		}
	})
}
