package limiter_test

import (
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// mustSet is the rules of the domains dcs.
func mustSet(t testing.TB, dcs ...descriptors.DomainConfig) *descriptors.Set {
	t.Helper()
	s, err := descriptors.NewSet(dcs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func keyFor(t testing.TB, s *descriptors.Set, domain, tenant string, entries ...descriptors.Entry) string {
	t.Helper()
	d := s.Domain(domain)
	l := descriptors.Match(d, entries)
	if l == nil {
		t.Fatalf("no limit for %v", entries)
	}
	return string(limiter.AppendKey(nil, "ratelimit", domain, l, entries, tenant))
}

func TestAppendKey(t *testing.T) {
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 1}
	s := mustSet(t, descriptors.DomainConfig{Name: "api", Descriptors: []descriptors.Descriptor{
		{Key: "k", Limit: lim},
		{Key: "a", Descriptors: []descriptors.Descriptor{{Key: "b", Limit: lim}}},
		{Key: "path", Value: "/files/*", ShareThreshold: true, Limit: lim},
	}})
	e := func(k, v string) descriptors.Entry { return descriptors.Entry{Key: k, Value: v} }
	tests := []struct {
		name    string
		entries []descriptors.Entry
		tenant  string
		want    string
	}{
		{"plain", []descriptors.Entry{e("k", "alice")}, "default", "ratelimit:{api/k=alice}:default:"},
		{"colon and braces", []descriptors.Entry{e("k", "a:b{c}")}, "default", "ratelimit:{api/k=a%3Ab%7Bc%7D}:default:"},
		{"glob chars", []descriptors.Entry{e("k", "*?[]")}, "default", "ratelimit:{api/k=%2A%3F%5B%5D}:default:"},
		{"newline and space", []descriptors.Entry{e("k", "a b\nc")}, "default", "ratelimit:{api/k=a%20b%0Ac}:default:"},
		{"non-ASCII", []descriptors.Entry{e("k", "é")}, "default", "ratelimit:{api/k=%C3%A9}:default:"},
		{"nested", []descriptors.Entry{e("a", "1"), e("b", "2")}, "premium", "ratelimit:{api/a=1/b=2}:premium:"},
		{"tenant escaped", []descriptors.Entry{e("k", "x")}, "p:q", "ratelimit:{api/k=x}:p%3Aq:"},
		{"share_threshold uses the pattern", []descriptors.Entry{e("path", "/files/a.txt")}, "default", "ratelimit:{api/path=%2Ffiles%2F%2A}:default:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keyFor(t, s, "api", tt.tenant, tt.entries...); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestAppendKeyNoCollision: values that differ only in characters with a
// meaning in the key scheme give different keys.
func TestAppendKeyNoCollision(t *testing.T) {
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 1}
	s := mustSet(t, descriptors.DomainConfig{Name: "d", Descriptors: []descriptors.Descriptor{
		{Key: "a", Limit: lim, Descriptors: []descriptors.Descriptor{{Key: "b", Limit: lim}}},
	}})
	e := func(k, v string) descriptors.Entry { return descriptors.Entry{Key: k, Value: v} }
	pairs := [][2][]descriptors.Entry{
		{{e("a", "x/b=y")}, {e("a", "x"), e("b", "y")}},
		{{e("a", "x}:t:")}, {e("a", "x")}},
		{{e("a", "%41")}, {e("a", "A")}},
	}
	for _, p := range pairs {
		k1, k2 := keyFor(t, s, "d", "default", p[0]...), keyFor(t, s, "d", "default", p[1]...)
		if k1 == k2 {
			t.Fatalf("%v and %v collide on %q", p[0], p[1], k1)
		}
	}
}

func TestAppendKeyLongIdentifierIsDigested(t *testing.T) {
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 1}
	s := mustSet(t, descriptors.DomainConfig{Name: "d", Descriptors: []descriptors.Descriptor{{Key: "k", Limit: lim}}})
	long1 := descriptors.Entry{Key: "k", Value: strings.Repeat("x", 300) + "1"}
	long2 := descriptors.Entry{Key: "k", Value: strings.Repeat("x", 300) + "2"}
	k1, k2 := keyFor(t, s, "d", "default", long1), keyFor(t, s, "d", "default", long2)
	if k1 == k2 {
		t.Fatal("digested keys collide")
	}
	for _, k := range []string{k1, k2} {
		if len(k)+12 > limiter.MaxKeyLen {
			t.Fatalf("key of %d bytes leaves no room for the window: %q", len(k), k)
		}
		if !strings.HasPrefix(k, "ratelimit:{d/k=xxxx") || !strings.HasSuffix(k, "}:default:") || !strings.Contains(k, "~") {
			t.Fatalf("digested key lost its readable shape: %q", k)
		}
	}
}

// appendKeyCase is one key to append: alice's under a rule of one a
// minute.
func appendKeyCase(t testing.TB) (*descriptors.Limit, []descriptors.Entry) {
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 1}
	s := mustSet(t, descriptors.DomainConfig{Name: "d", Descriptors: []descriptors.Descriptor{{Key: "k", Limit: lim}}})
	entries := []descriptors.Entry{{Key: "k", Value: "alice"}}
	return descriptors.Match(s.Domain("d"), entries), entries
}

func TestAppendKeyDoesNotAllocate(t *testing.T) {
	l, entries := appendKeyCase(t)
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		buf = limiter.AppendKey(buf[:0], "ratelimit", "d", l, entries, "default")
	})
	if allocs != 0 {
		t.Fatalf("AppendKey allocates %v times per call", allocs)
	}
}

func BenchmarkAppendKey(b *testing.B) {
	l, entries := appendKeyCase(b)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = limiter.AppendKey(buf[:0], "ratelimit", "d", l, entries, "default")
	}
}

func TestAppendKeyLongTenantIsDigested(t *testing.T) {
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 1}
	s := mustSet(t, descriptors.DomainConfig{Name: "d", Descriptors: []descriptors.Descriptor{{Key: "k", Limit: lim}}})
	e := descriptors.Entry{Key: "k", Value: "v"}
	k1 := keyFor(t, s, "d", strings.Repeat("t", 4000)+"1", e)
	k2 := keyFor(t, s, "d", strings.Repeat("t", 4000)+"2", e)
	if k1 == k2 {
		t.Fatal("digested tenants collide")
	}
	for _, k := range []string{k1, k2} {
		if len(k)+12 > limiter.MaxKeyLen || !strings.HasPrefix(k, "ratelimit:{d/k=v}:tttt") {
			t.Fatalf("long tenant key %q (%d bytes)", k, len(k))
		}
	}
}
