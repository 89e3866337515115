package examples_test

import (
	"sort"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// Paths of the quota service example.
const (
	rlqsYAML  = "envoy-rlqs/envoy.yaml"
	rlqsRules = "envoy-rlqs/rules"
)

const rlqsFilter = "envoy.filters.http.rate_limit_quota"

// rlqsSampleHeaders are the values tried for custom_value header inputs;
// "" is the header missing (Envoy leaves the key out of the bucket id).
var rlqsSampleHeaders = map[string][]string{
	"x-tenant": {"", "acme", "gold"},
}

// TestRLQSExample decodes envoy-rlqs/envoy.yaml strictly into Envoy's
// Bootstrap, validates every typed config inside, and checks what Envoy's
// rate_limit_quota filter needs of it (docs/rlqs.md): the RLQS cluster
// speaks HTTP/2, the domain has rules, no_assignment_behavior is a blanket
// rule, the expired fallback lasts whole seconds, and every bucket id the
// matchers can build matches a rule of the domain.
func TestRLQSExample(t *testing.T) {
	var bs bootstrapv3.Bootstrap
	decodeStrict(t, rlqsYAML, readYAML(t, rlqsYAML), &bs)
	validateTree(t, rlqsYAML, &bs)
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	cfg := rlqsConfig(t, &bs)
	name := cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	c, ok := clusters[name]
	if !ok {
		t.Fatalf("rlqs_server names cluster %q, which %s does not define", name, rlqsYAML)
	}
	checkHTTP2(t, c)
	rules := loadDir(t, rlqsRules)
	domain := rules.Set.Domain(cfg.GetDomain())
	if domain == nil {
		t.Fatalf("domain %q has no rules in %s", cfg.GetDomain(), rlqsRules)
	}
	matchers := cfg.GetBucketMatchers().GetMatcherList().GetMatchers()
	if len(matchers) == 0 {
		t.Fatal("no bucket matchers")
	}
	for i, m := range matchers {
		var bsettings rlqsv3.RateLimitQuotaBucketSettings
		if err := m.GetOnMatch().GetAction().GetTypedConfig().UnmarshalTo(&bsettings); err != nil {
			t.Fatalf("matcher %d: %v", i, err)
		}
		checkBucketSettings(t, i, &bsettings)
		for _, id := range bucketIDs(t, i, bsettings.GetBucketIdBuilder()) {
			entries := make([]descriptors.Entry, 0, len(id))
			for k, v := range id {
				entries = append(entries, descriptors.Entry{Key: k, Value: v})
			}
			if l, _ := descriptors.MatchBucket(domain, entries); l == nil || l.Unlimited {
				t.Errorf("matcher %d: bucket %v matches no limit of domain %q", i, id, cfg.GetDomain())
			}
		}
	}
}

// rlqsConfig returns the quota filter's config; it must come before the
// router.
func rlqsConfig(t *testing.T, bs *bootstrapv3.Bootstrap) *rlqsv3.RateLimitQuotaFilterConfig {
	t.Helper()
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetName() != hcmFilter || f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				filters := hcm.GetHttpFilters()
				for j, hf := range filters {
					if hf.GetName() != rlqsFilter {
						continue
					}
					if j == len(filters)-1 || filters[len(filters)-1].GetName() != routerFilter {
						t.Errorf("%s must come before the router, the last filter", rlqsFilter)
					}
					var cfg rlqsv3.RateLimitQuotaFilterConfig
					if err := hf.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
						t.Fatal(err)
					}
					return &cfg
				}
			}
		}
	}
	t.Fatalf("%s has no %s filter", rlqsYAML, rlqsFilter)
	return nil
}

// checkBucketSettings checks the settings Envoy reads in its own way.
func checkBucketSettings(t *testing.T, i int, s *rlqsv3.RateLimitQuotaBucketSettings) {
	t.Helper()
	if d := s.GetReportingInterval().AsDuration(); d != 5*time.Second {
		t.Errorf("matcher %d: reporting_interval %v: Envoy reports every 5s whatever it says; say 5s", i, d)
	}
	if na := s.GetNoAssignmentBehavior(); na != nil {
		if _, ok := na.GetFallbackRateLimit().GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok {
			t.Errorf("matcher %d: no_assignment_behavior must be a blanket rule (Envoy keeps no token bucket behind it)", i)
		}
	}
	if ex := s.GetExpiredAssignmentBehavior(); ex != nil {
		if ex.GetReuseLastAssignment() != nil {
			t.Errorf("matcher %d: reuse_last_assignment is not implemented by Envoy", i)
		}
		if d := ex.GetExpiredAssignmentBehaviorTimeout().AsDuration(); d < time.Second || d%time.Second != 0 {
			t.Errorf("matcher %d: expired_assignment_behavior_timeout %v: Envoy reads whole seconds only", i, d)
		}
		if tb := ex.GetFallbackRateLimit().GetTokenBucket(); tb != nil &&
			(tb.GetTokensPerFill() == nil || tb.GetFillInterval().AsDuration() < time.Second) {
			t.Errorf("matcher %d: fallback token bucket %v: Envoy reads an unset tokens_per_fill as 0 and whole seconds of fill_interval", i, tb)
		}
	}
}

// bucketIDs lists every bucket id a builder makes from the sample header
// values, leaving out keys whose value comes out empty, as Envoy does.
func bucketIDs(t *testing.T, i int, b *rlqsv3.RateLimitQuotaBucketSettings_BucketIdBuilder) []map[string]string {
	t.Helper()
	ids := []map[string]string{{}}
	keys := make([]string, 0, len(b.GetBucketIdBuilder()))
	for k := range b.GetBucketIdBuilder() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vb := b.GetBucketIdBuilder()[k]
		values := []string{vb.GetStringValue()}
		if cv := vb.GetCustomValue(); cv != nil {
			var in matcherv3.HttpRequestHeaderMatchInput
			if err := cv.GetTypedConfig().UnmarshalTo(&in); err != nil {
				t.Fatalf("matcher %d: bucket id %q: only request header inputs are checked here: %v", i, k, err)
			}
			values = rlqsSampleHeaders[in.GetHeaderName()]
			if len(values) == 0 {
				t.Fatalf("matcher %d: no sample values for header %q", i, in.GetHeaderName())
			}
		}
		var next []map[string]string
		for _, id := range ids {
			for _, v := range values {
				n := map[string]string{}
				for a, b := range id {
					n[a] = b
				}
				if v != "" {
					n[k] = v
				}
				next = append(next, n)
			}
		}
		ids = next
	}
	if len(ids) == 0 {
		t.Fatalf("matcher %d: no bucket ids", i)
	}
	return ids
}
