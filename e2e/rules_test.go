package e2e_test

import (
	_ "embed"
	"fmt"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The rules the e2e tests start the binary with, and the requests they
// send.

// oneRule is a domain of one rule: key, rpu a unit.
func oneRule(domain, key, unit string, rpu int64) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit: {unit: %s, requests_per_unit: %d}\n",
		domain, key, unit, rpu)
}

// The rules files of testdata, by the tests that use them. The tests on
// testdata/allornothing (domains all and plain) and testdata/hard (hard and
// hardall) use those directories as they are: an all-or-nothing domain
// and a plain one with the same rules.
var (
	//go:embed testdata/core.yaml
	coreRules string
	// deployRules are the rules of the Redis deployment tests: day-long
	// windows, so that nothing rolls over during a test.
	//go:embed testdata/deploy.yaml
	deployRules string
	//go:embed testdata/cache.yaml
	cacheRules string
	//go:embed testdata/admin.yaml
	adminRules string
	// dropinRules: a per-key limit of 5 beside rules for long and odd
	// values, a per-second limit and a shadowed one.
	//go:embed testdata/dropin.yaml
	dropinRules string
	//go:embed testdata/outage.yaml
	outageRules string
	//go:embed testdata/refstats.yaml
	refStatsRules string
	//go:embed testdata/rlqs.yaml
	rlqsRules string
)

// loadLimit is the limit of deployRules' "load" rule: high enough never to
// deny, so that each OK response tells the counter's value after its hit.
const loadLimit = 1_000_000_000

// refRules are rules files laid out as a deployment of envoyproxy/ratelimit
// has them: under $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config, one of them in
// a nested directory.
var refRules = map[string]string{
	"ratelimit/config/ref.yaml":          oneRule("ref", "user", "day", 3),
	"ratelimit/config/teams/nested.yaml": oneRule("nested", "team", "day", 1),
}

var (
	breakerRules = oneRule("brk", "k", "hour", 100)
	boundsRules  = oneRule("bounds", "k", "hour", 1_000_000)
	faultRules   = oneRule("faults", "caller", "year", faultLimit)
	tlsRules     = oneRule("tls", "client", "minute", 2)
	traceRules   = oneRule("trace", "user_id", "minute", 100)
	// badReloadRules fails validation at line 4.
	badReloadRules = oneRule("reload", "k", "fortnight", 1)
)

// reloadRules is a domain whose one limit is rpu per hour: high enough
// that load never reaches it, and visible in every answer's current_limit.
func reloadRules(rpu int64) string { return oneRule("reload", "k", "hour", rpu) }

// desc is a descriptor of the entries kv: key, value, key, value, ...
func desc(kv ...string) *common.RateLimitDescriptor {
	d := &common.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// request is a request of ds in domain e2e (coreRules).
func request(ds ...*common.RateLimitDescriptor) *rls.RateLimitRequest {
	return requestIn("e2e", ds...)
}

// requestIn is a request of ds in domain.
func requestIn(domain string, ds ...*common.RateLimitDescriptor) *rls.RateLimitRequest {
	return &rls.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// domainRequest builds a request of one descriptor {key: id} per key.
func domainRequest(domain, id string, keys ...string) *rls.RateLimitRequest {
	r := requestIn(domain)
	for _, k := range keys {
		r.Descriptors = append(r.Descriptors, desc(k, id))
	}
	return r
}
