package server

import (
	"context"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

// TestMemoryMaxKeys: with --memory-max-keys 2, a request for a third key
// fails as a store error, answered by --on-store-error, while the two
// held keys keep being decided; the gauges say so.
func TestMemoryMaxKeys(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   codes.Code // of the refused request; OK: answered
		code   rlspb.RateLimitResponse_Code
	}{
		{"error", codes.Unavailable, 0},
		{"allow", codes.OK, rlspb.RateLimitResponse_OK},
		{"deny", codes.OK, rlspb.RateLimitResponse_OVER_LIMIT},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			s, _ := testServer(t, map[string]string{"adm.yaml": adminRules},
				"--memory-max-keys", "2", "--on-store-error", tc.policy, "--drain", "0s")
			ctx := context.Background()
			decide := func(v string) (*rlspb.RateLimitResponse, error) {
				return s.service.ShouldRateLimit(ctx, rlsRequest("adm", "win", v))
			}
			for _, v := range []string{"a", "b"} {
				if resp, err := decide(v); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit == nil {
					t.Fatalf("held key %s: %v, %v", v, resp, err)
				}
			}
			resp, err := decide("c")
			if status.Code(err) != tc.want || (err == nil && (resp.OverallCode != tc.code || resp.Statuses[0].CurrentLimit != nil)) {
				t.Fatalf("a third key: %v, %v; want the %s policy's answer", resp, err, tc.policy)
			}
			if resp, err := decide("a"); err != nil || resp.Statuses[0].LimitRemaining != 3 {
				t.Fatalf("a held key after the refusal: %v, %v", resp, err)
			}
			if got := gathered(t, s, "fastlimit_memory_keys"); got != 2 {
				t.Errorf("fastlimit_memory_keys = %v", got)
			}
			if got := gathered(t, s, "fastlimit_memory_refused_total"); got != 1 {
				t.Errorf("fastlimit_memory_refused_total = %v", got)
			}
		})
	}
}

// gathered returns the value of the unlabelled metric name of s's
// registry, after linting every family the registry gathers.
func gathered(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	mfs := scrape.Linted(t, s.registry)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}

// metricValue is the value of the series of name with the given label
// pairs in g (a counter, gauge or untyped value), 0 when there is none.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			default:
				return m.GetUntyped().GetValue()
			}
		}
	}
	return 0
}
