package descriptors_test

import (
	"fmt"
	"os"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// A Set built in code, without a rules file: a limit per API key, a
// stricter one for uploads, and a wildcard over every key of a partner.
func ExampleNewSet() {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{
		Name: "api",
		Descriptors: []descriptors.Descriptor{{
			Key:   "api_key",
			Limit: &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 100},
			Descriptors: []descriptors.Descriptor{{
				Key:   "path",
				Value: "/upload",
				Limit: &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 5},
			}},
		}, {
			Key:   "partner",
			Value: "acme-*",
			Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 50, Algorithm: descriptors.TokenBucket},
		}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := set.Dump(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// api.api_key: algorithm=fixed_window unit=MINUTE requests_per_unit=100 unit_multiplier=1 cost=1 shadow_mode=false quota_mode=false
	// api.api_key.path_/upload: algorithm=fixed_window unit=MINUTE requests_per_unit=5 unit_multiplier=1 cost=1 shadow_mode=false quota_mode=false
	// api.partner_acme-*: algorithm=token_bucket unit=SECOND requests_per_unit=50 unit_multiplier=1 burst=50 cost=1 shadow_mode=false quota_mode=false
}

// Match takes a request's entries in order; the path must be as deep as
// the entries are many.
func ExampleMatch() {
	set, _ := descriptors.NewSet([]descriptors.DomainConfig{{
		Name: "api",
		Descriptors: []descriptors.Descriptor{
			{Key: "partner", Value: "acme-*", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 50}},
			{Key: "partner", Value: "acme-internal", Limit: &descriptors.Limit{Unlimited: true}},
		},
	}})
	domain := set.Domain("api")
	for _, value := range []string{"acme-eu", "acme-internal", "globex"} {
		l := descriptors.Match(domain, []descriptors.Entry{{Key: "partner", Value: value}})
		switch {
		case l == nil:
			fmt.Println(value, "no limit")
		case l.Unlimited:
			fmt.Println(value, "unlimited")
		default:
			fmt.Println(value, l.RequestsPerUnit, "per", l.Unit)
		}
	}
	// Output:
	// acme-eu 50 per SECOND
	// acme-internal unlimited
	// globex no limit
}

// MatchBucket matches entries given in no order, such as an Envoy quota
// bucket id, and returns them in the order of the rule they matched.
func ExampleMatchBucket() {
	set, _ := descriptors.NewSet([]descriptors.DomainConfig{{
		Name: "api",
		Descriptors: []descriptors.Descriptor{{
			Key: "name", Value: "upload",
			Descriptors: []descriptors.Descriptor{{
				Key:   "tenant",
				Limit: &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 20},
			}},
		}},
	}})
	l, order := descriptors.MatchBucket(set.Domain("api"), []descriptors.Entry{
		{Key: "tenant", Value: "gold"},
		{Key: "name", Value: "upload"},
	})
	fmt.Println(l.Path, order)
	// Output:
	// api.name_upload.tenant [{name upload} {tenant gold}]
}
