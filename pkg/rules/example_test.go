package rules_test

import (
	"fmt"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// Parse compiles rules files held in memory; Load reads a directory of them.
func ExampleParse() {
	loaded, err := rules.Parse(map[string][]byte{"api.yaml": []byte(`
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: path
        value: /upload
        rate_limit: {unit: minute, requests_per_unit: 5}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	domain := loaded.Set.Domain("api")
	for _, entries := range [][]descriptors.Entry{
		{{Key: "api_key", Value: "alice"}},
		{{Key: "api_key", Value: "alice"}, {Key: "path", Value: "/upload"}},
		{{Key: "user", Value: "bob"}},
	} {
		if l := descriptors.Match(domain, entries); l != nil {
			fmt.Println(l.Path, l.RequestsPerUnit, l.Unit)
		} else {
			fmt.Println("no limit")
		}
	}
	// Output:
	// api.api_key 100 MINUTE
	// api.api_key.path_/upload 5 MINUTE
	// no limit
}

// Every problem of every file is reported at once, each with its file and
// line.
func ExampleParse_errors() {
	files := map[string][]byte{
		"api.yaml": []byte("domain: api\n" +
			"descriptors:\n" +
			"  - {key: api_key, rate_limit: {unit: fortnight, requests_per_unit: 100}}\n" +
			"  - {key: user, rate_limt: {unit: minute, requests_per_unit: 10}}\n"),
		"web.yaml": []byte("domain: api\n"),
	}
	_, err := rules.Parse(files)
	for _, e := range rules.Flatten(err) {
		fmt.Println(e)
	}
	// Output:
	// api.yaml:3: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)
	// api.yaml:4: unknown key 'rate_limt'; did you mean 'rate_limit'?
	// web.yaml:1: duplicate domain 'api' (first at api.yaml:1); files of one domain are merged only with --merge-domain-config (MERGE_DOMAIN_CONFIG=true)
}

// FromXDS compiles the RateLimitConfig resources of an xDS snapshot.
func ExampleFromXDS() {
	loaded, err := rules.FromXDS([]*rlsconf.RateLimitConfig{{
		Name:   "api-rules",
		Domain: "api",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       "api_key",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 10},
		}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(loaded.Resources)
	l := descriptors.Match(loaded.Set.Domain("api"), []descriptors.Entry{{Key: "api_key", Value: "alice"}})
	fmt.Println(l)
	// Output:
	// [api-rules]
	// api.api_key: algorithm=fixed_window unit=SECOND requests_per_unit=10 unit_multiplier=1 cost=1 shadow_mode=false quota_mode=false
}

// FromXDSWith adds FastLimit's extensions, which the RateLimitConfig
// proto cannot carry, from an overlay: here a token bucket holding 20.
func ExampleFromXDSWith() {
	ov, err := rules.ParseOverlay("overlay.yaml", []byte(`domains:
  - domain: api
    descriptors:
      - key: api_key
        rate_limit: {algorithm: token_bucket, burst: 20}
      - key: gone
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	loaded, err := rules.FromXDSWith([]*rlsconf.RateLimitConfig{{
		Name:   "api-rules",
		Domain: "api",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       "api_key",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 10},
		}},
	}}, ov)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(descriptors.Match(loaded.Set.Domain("api"), []descriptors.Entry{{Key: "api_key", Value: "alice"}}))
	fmt.Println(loaded.Warnings)
	// Output:
	// api.api_key: algorithm=token_bucket unit=SECOND requests_per_unit=10 unit_multiplier=1 burst=20 cost=1 shadow_mode=false quota_mode=false
	// [overlay.yaml:6: no descriptor api.gone in the rules from xDS: nothing to extend]
}
