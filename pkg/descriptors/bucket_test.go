package descriptors_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

func bucketRules(t testing.TB) *descriptors.Domain {
	t.Helper()
	s, err := descriptors.NewSet([]descriptors.DomainConfig{{
		Name: "d",
		Descriptors: ds{
			{Key: "api", Value: "orders", Descriptors: ds{
				{Key: "tenant", Limit: lim()},
				{Key: "tenant", Value: "gold", Limit: lim()},
			}},
			{Key: "api", Value: "*", Descriptors: ds{
				{Key: "tenant", Value: "t*", Limit: lim()},
			}},
			{Key: "tenant", Value: "gold", Descriptors: ds{
				{Key: "api", Limit: lim()},
			}},
			{Key: "path", Value: "/a", Limit: lim()},
			{Key: "x", Descriptors: ds{
				{Key: "y", Descriptors: ds{{Key: "z", Limit: lim()}}},
				{Key: "z", Descriptors: ds{{Key: "w", Limit: lim()}}},
			}},
			{Key: "solo", Limit: lim(), Descriptors: ds{{Key: "more", Limit: lim()}}},
			{Key: "a", Value: "1", Descriptors: ds{{Key: "c", Limit: lim()}}},
			{Key: "b", Value: "2", Descriptors: ds{{Key: "a", Descriptors: ds{{Key: "c", Limit: lim()}}}}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s.Domain("d")
}

func TestMatchBucket(t *testing.T) {
	d := bucketRules(t)
	for _, tc := range []struct {
		name    string
		entries map[string]string
		path    string // "" for no match
		order   string // keys in matched order
	}{
		{"one entry", map[string]string{"path": "/a"}, "d.path_/a", "path"},
		{"value must match", map[string]string{"path": "/b"}, "", ""},
		{"exact beats wildcard at the top", map[string]string{"api": "orders", "tenant": "bronze"}, "d.api_orders.tenant", "api,tenant"},
		{"exact beats key-only below", map[string]string{"api": "orders", "tenant": "gold"}, "d.api_orders.tenant_gold", "api,tenant"},
		{"wildcard path", map[string]string{"api": "users", "tenant": "t1"}, "d.api_*.tenant_t*", "api,tenant"},
		{"exact value picks the first level", map[string]string{"api": "users", "tenant": "gold"}, "d.tenant_gold.api", "tenant,api"},
		{"backtracks to the other first entry", map[string]string{"a": "1", "b": "2", "c": "3"}, "d.b_2.a.c", "b,a,c"},
		{"three levels, tree picks order", map[string]string{"z": "3", "y": "2", "x": "1"}, "d.x.y.z", "x,y,z"},
		{"three levels, second branch", map[string]string{"w": "4", "z": "3", "x": "1"}, "d.x.z.w", "x,z,w"},
		{"every entry must be used", map[string]string{"path": "/a", "extra": "1"}, "", ""},
		{"limit at a node with children", map[string]string{"solo": "s"}, "d.solo", "solo"},
		{"path deeper than rules", map[string]string{"x": "1", "y": "2"}, "", ""},
		{"no entries", map[string]string{}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries := entriesOf(tc.entries)
			l, order := descriptors.MatchBucket(d, entries)
			got := ""
			if l != nil {
				got = l.Path
			}
			if got != tc.path {
				t.Fatalf("limit = %q, want %q", got, tc.path)
			}
			if l == nil {
				if order != nil {
					t.Fatalf("order = %v without a match", order)
				}
				return
			}
			if keys := keysOf(order); keys != tc.order {
				t.Errorf("order = %s, want %s", keys, tc.order)
			}
			if m := descriptors.Match(d, order); m != l {
				t.Errorf("Match(order) = %v, want the same limit", m)
			}
		})
	}
}

func TestMatchBucketBounds(t *testing.T) {
	d := bucketRules(t)
	if l, _ := descriptors.MatchBucket(nil, entriesOf(map[string]string{"path": "/a"})); l != nil {
		t.Error("nil domain matched")
	}
	many := map[string]string{}
	for i := range descriptors.MaxBucketEntries + 1 {
		many[string(rune('a'+i))] = "v"
	}
	if l, _ := descriptors.MatchBucket(d, entriesOf(many)); l != nil {
		t.Error("too many entries matched")
	}
}

// FuzzMatchBucket checks MatchBucket against a reference that tries every
// order of the entries with Match: both find a limit or neither does, the
// limit found is one some order matches, and the order returned matches it.
func FuzzMatchBucket(f *testing.F) {
	f.Add("api=orders,tenant=gold")
	f.Add("tenant=gold,api=users")
	f.Add("x=1,z=3,w=4")
	f.Add("y=2,x=1,z=")
	f.Add("solo=s,more=m")
	f.Add("c=3,a=1,b=2")
	d := bucketRules(f)
	f.Fuzz(func(t *testing.T, spec string) {
		m := map[string]string{}
		for _, part := range strings.Split(spec, ",") {
			k, v, _ := strings.Cut(part, "=")
			m[k] = v
		}
		if len(m) > 5 {
			return
		}
		entries := entriesOf(m)
		l, order := descriptors.MatchBucket(d, entries)
		matches := map[*descriptors.Limit]bool{}
		permute(entries, 0, func(p []descriptors.Entry) {
			if ml := descriptors.Match(d, p); ml != nil {
				matches[ml] = true
			}
		})
		if (l != nil) != (len(matches) > 0) {
			t.Fatalf("%v: MatchBucket = %v, orders match %d limits", m, l, len(matches))
		}
		if l != nil && (!matches[l] || descriptors.Match(d, order) != l) {
			t.Fatalf("%v: limit %s not matched by order %v", m, l.Path, order)
		}
	})
}

func permute(e []descriptors.Entry, k int, visit func([]descriptors.Entry)) {
	if k == len(e) {
		visit(e)
		return
	}
	for i := k; i < len(e); i++ {
		e[k], e[i] = e[i], e[k]
		permute(e, k+1, visit)
		e[k], e[i] = e[i], e[k]
	}
}

func entriesOf(m map[string]string) []descriptors.Entry {
	var e []descriptors.Entry
	for k, v := range m {
		e = append(e, descriptors.Entry{Key: k, Value: v})
	}
	// Shuffle deterministically away from key order, so that order is the
	// function's doing.
	slices.SortFunc(e, func(a, b descriptors.Entry) int { return strings.Compare(b.Key, a.Key) })
	return e
}

func keysOf(e []descriptors.Entry) string {
	keys := make([]string, len(e))
	for i, x := range e {
		keys[i] = x.Key
	}
	return strings.Join(keys, ",")
}
