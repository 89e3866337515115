package descriptors_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// benchLookups is how many distinct requests a benchmark cycles through,
// so that a large rule set is not measured on one hot path only.
const benchLookups = 1024

// maxWildcards bounds the wildcard rule sets built for benchmarks.
const maxWildcards = 1000

// benchDomain builds a domain "bench" of n rules on key "user": exact
// values "u0".."u<n-1>", or with wildcard, patterns "u<i>-*". Next to
// them sit a nested rule (plan=premium, user) and a key-only rule on
// "ip", as a real rules file would have.
func benchDomain(b *testing.B, n int, wildcard bool) *descriptors.Domain {
	b.Helper()
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 100}
	rules := make([]descriptors.Descriptor, 0, n+2)
	for i := range n {
		v := "u" + strconv.Itoa(i)
		if wildcard {
			v += "-*"
		}
		rules = append(rules, descriptors.Descriptor{Key: "user", Value: v, Limit: lim})
	}
	rules = append(rules,
		descriptors.Descriptor{Key: "plan", Value: "premium", Descriptors: []descriptors.Descriptor{{Key: "user", Limit: lim}}},
		descriptors.Descriptor{Key: "ip", Limit: lim},
	)
	s, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "bench", Descriptors: rules}})
	if err != nil {
		b.Fatal(err)
	}
	return s.Domain("bench")
}

// BenchmarkMatch measures Match against rule sets of 10 and 100,000
// rules. Exact values and key-only rules are map lookups, so their cost
// should not grow with the rule count; wildcard values are tried in file
// order, so "wildcard/last" (the request matches the last pattern) grows
// linearly by design.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{10, 100_000} {
		exact := benchDomain(b, n, false)
		// NewSet checks each wildcard against the earlier ones of its key,
		// so 100,000 of them take minutes to compile; 1,000 show the
		// linear scan well enough.
		nw := min(n, maxWildcards)
		wild := benchDomain(b, nw, true)
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		var users [benchLookups][]descriptors.Entry
		for i := range users {
			users[i] = []descriptors.Entry{{Key: "user", Value: "u" + strconv.Itoa(rng.IntN(n))}}
		}
		cases := []struct {
			name string
			d    *descriptors.Domain
			reqs func(i int) []descriptors.Entry
		}{
			{"exact", exact, func(i int) []descriptors.Entry { return users[i%benchLookups] }},
			{"keyonly", exact, fixed(descriptors.Entry{Key: "ip", Value: "10.0.0.1"})},
			{"nested", exact, fixed(descriptors.Entry{Key: "plan", Value: "premium"}, descriptors.Entry{Key: "user", Value: "alice"})},
			{"miss", exact, fixed(descriptors.Entry{Key: "user", Value: "nobody"})},
			{"wildcard/first", wild, fixed(descriptors.Entry{Key: "user", Value: "u0-x"})},
			{"wildcard/last", wild, fixed(descriptors.Entry{Key: "user", Value: fmt.Sprintf("u%d-x", nw-1)})},
		}
		for _, c := range cases {
			rules := n
			if c.d == wild {
				rules = nw
			}
			b.Run(fmt.Sprintf("%s/rules=%d", c.name, rules), func(b *testing.B) {
				if descriptors.Match(c.d, c.reqs(0)) == nil && c.name != "miss" {
					b.Fatal("no match")
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if descriptors.Match(c.d, c.reqs(i)) == nil && c.name != "miss" {
						b.Fatal("no match")
					}
					i++
				}
			})
		}
	}
}

func fixed(es ...descriptors.Entry) func(int) []descriptors.Entry {
	return func(int) []descriptors.Entry { return es }
}
