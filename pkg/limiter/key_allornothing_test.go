package limiter_test

import (
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// hashTag returns what Redis Cluster hashes for key: the text between the
// first '{' and the next '}', if non-empty.
func hashTag(key string) string {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return key
	}
	tag, _, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return key
	}
	return tag
}

func TestAppendAllOrNothingKey(t *testing.T) {
	lim := &descriptors.Limit{}
	e := func(kv ...string) []descriptors.Entry {
		var out []descriptors.Entry
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	allOrNothingKey := func(domain string, entries []descriptors.Entry, tenant string) string {
		return string(limiter.AppendAllOrNothingKey(nil, "ratelimit", domain, lim, entries, tenant))
	}
	for _, tc := range []struct {
		domain  string
		entries []descriptors.Entry
		tenant  string
		want    string
	}{
		{"api", e("k", "alice"), "default", "ratelimit:{api}/k=alice:default:"},
		{"api", e("a", "1", "b", "2"), "premium", "ratelimit:{api}/a=1/b=2:premium:"},
		{"my api", e("k", "a:b{c}~"), "default", "ratelimit:{my%20api}/k=a%3Ab%7Bc%7D%7E:default:"},
	} {
		if got := allOrNothingKey(tc.domain, tc.entries, tc.tenant); got != tc.want {
			t.Errorf("AppendAllOrNothingKey(%q, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
		}
	}

	// Every key of a domain hashes by the domain alone, also when long.
	long := strings.Repeat("x", 300)
	longDomain := strings.Repeat("d", 100)
	keys := []string{
		allOrNothingKey("api", e("k", "alice"), "default"),
		allOrNothingKey("api", e("a", "1", "b", "2"), "premium"),
		allOrNothingKey("api", e("k", long), "default"),
	}
	for _, k := range keys {
		if tag := hashTag(k); tag != "api" {
			t.Errorf("%q hashes by %q, want the domain", k, tag)
		}
	}
	k1, k2 := allOrNothingKey(longDomain, e("k", long+"1"), "default"), allOrNothingKey(longDomain, e("k", long+"2"), "default")
	if k1 == k2 || hashTag(k1) != hashTag(k2) || len(hashTag(k1)) > 64 {
		t.Errorf("long domain keys %q and %q: want different keys with one short tag", k1, k2)
	}
	if hashTag(k1) == hashTag(allOrNothingKey(longDomain+"e", e("k", "v"), "default")) {
		t.Error("two long domains share a tag")
	}
	for _, k := range append(keys, k1, k2) {
		if len(k)+12 > limiter.MaxKeyLen {
			t.Errorf("key of %d bytes leaves no room for the window: %q", len(k), k)
		}
	}

	// All-or-nothing and plain keys of the same descriptor differ.
	if plain := string(limiter.AppendKey(nil, "ratelimit", "api", lim, e("k", "alice"), "default")); plain == keys[0] {
		t.Errorf("all-or-nothing and plain keys collide: %q", plain)
	}
}

// TestAppendKeyTildeIsEscaped: '~' marks a digest, so a value cannot spell
// out another identifier's digested key.
func TestAppendKeyTildeIsEscaped(t *testing.T) {
	lim := &descriptors.Limit{}
	long := []descriptors.Entry{{Key: "k", Value: strings.Repeat("x", 300)}}
	digested := string(limiter.AppendKey(nil, "ratelimit", "d", lim, long, "default"))
	// Spell the digested identifier as a value: "d/k=" is the domain and
	// key, the rest the value.
	id := strings.TrimSuffix(strings.TrimPrefix(digested, "ratelimit:{d/k="), "}:default:")
	forged := string(limiter.AppendKey(nil, "ratelimit", "d", lim, []descriptors.Entry{{Key: "k", Value: id}}, "default"))
	if forged == digested {
		t.Fatalf("a value spells out a digested key: %q", forged)
	}
}

func TestAppendAllOrNothingKeyDoesNotAllocate(t *testing.T) {
	lim := &descriptors.Limit{}
	entries := []descriptors.Entry{{Key: "k", Value: "alice"}}
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		buf = limiter.AppendAllOrNothingKey(buf[:0], "ratelimit", "d", lim, entries, "default")
	})
	if allocs != 0 {
		t.Fatalf("AppendAllOrNothingKey allocates %v times per call", allocs)
	}
}
