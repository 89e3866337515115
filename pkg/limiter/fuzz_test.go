package limiter_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// FuzzAppendKey checks the key scheme on arbitrary domains, entries and
// tenants, plain and allOrNothing: exactly one '{' and one '}', the hash tag
// free of ':' and whitespace, an all-or-nothing key's tag a function of the
// domain alone, and distinct entry lists, tenants and schemes never
// sharing a key.
func FuzzAppendKey(f *testing.F) {
	f.Add("api", "default", "k", "alice", "k", "bob", false, false)
	f.Add("api", "default", "a", "x/b=y", "b", "y", true, true)
	f.Add("d", "p:q", "k", "x}:t:", "k", "x", false, true)
	f.Add("{d}", "t\n", "k{", "}", ":", "*", true, false)
	f.Add("d", "default", "k", "%41", "k", "A", false, false)
	f.Add("d", "default", "k", "a~b", "k", "a%7Eb", false, true)
	f.Add(strings.Repeat("dom", 40), "default", "k", strings.Repeat("x", 300), "k", strings.Repeat("x", 301), true, true)
	f.Add("é", "ünï", "k\x00", "\xff\xfe", " ", "\t", false, false)
	lim := &descriptors.Limit{}
	f.Fuzz(func(t *testing.T, domain, tenant, k1, v1, k2, v2 string, two, allOrNothing bool) {
		if domain == "" {
			t.Skip("Check refuses an empty domain before any key is built")
		}
		build := limiter.AppendKey[descriptors.Entry]
		if allOrNothing {
			build = limiter.AppendAllOrNothingKey[descriptors.Entry]
		}
		key := func(domain, tenant string, entries ...descriptors.Entry) string {
			return string(build(nil, "ratelimit", domain, lim, entries, tenant))
		}
		a := []descriptors.Entry{{Key: k1, Value: v1}}
		b := []descriptors.Entry{{Key: k2, Value: v2}}
		if two {
			a = append(a, descriptors.Entry{Key: k2, Value: v2})
			b = []descriptors.Entry{{Key: k1, Value: v1 + "/" + k2 + "=" + v2}}
		}
		ka, kb := key(domain, tenant, a...), key(domain, tenant, b...)

		for _, k := range []string{ka, kb} {
			checkKeyShape(t, k)
			if len(tenant) <= 20 && len(k)+12 > limiter.MaxKeyLen {
				t.Errorf("key of %d bytes leaves no room for the window: %q", len(k), k)
			}
		}
		if ka != key(domain, tenant, a...) {
			t.Error("AppendKey is not deterministic")
		}
		if !sameEntries(a, b) && ka == kb {
			t.Errorf("%q and %q share key %q", a, b, ka)
		}
		if key(domain, tenant+"x", a...) == ka {
			t.Errorf("tenants %q and %q share key %q", tenant, tenant+"x", ka)
		}
		if key(domain+"x", tenant, a...) == ka {
			t.Errorf("domains %q and %q share key %q", domain, domain+"x", ka)
		}
		if allOrNothing {
			if hashTag(ka) != hashTag(kb) {
				t.Errorf("all-or-nothing keys of one domain hash differently: %q, %q", ka, kb)
			}
			if plain := string(limiter.AppendKey(nil, "ratelimit", domain, lim, a, tenant)); plain == ka {
				t.Errorf("all-or-nothing and plain keys collide: %q", ka)
			}
		}
	})
}

// checkKeyShape checks that k has exactly one '{' and one '}', in that
// order and right after the prefix, around a tag without ':' or
// whitespace.
func checkKeyShape(t *testing.T, k string) {
	t.Helper()
	if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
		t.Fatalf("key %q does not have exactly one '{' and one '}'", k)
	}
	if !strings.HasPrefix(k, "ratelimit:{") || !strings.HasSuffix(k, ":") {
		t.Fatalf("key %q lost its shape", k)
	}
	tag := hashTag(k)
	if tag == k || tag == "" {
		t.Fatalf("key %q has an empty hash tag", k)
	}
	if strings.ContainsAny(tag, ": \t\n\r\v\f") {
		t.Fatalf("hash tag %q of %q holds ':' or whitespace", tag, k)
	}
}

func sameEntries(a, b []descriptors.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fuzzKeys are the entry keys of fuzzRules, which fuzzed requests mostly
// use so that they match rules.
var fuzzKeys = []string{"a", "one", "sw", "tb", "free", "shadow", "q1", "q2", "qfree", "big", "small",
	"half", "wild", "share", "plan", "user", "repl"}

// fuzzRules are rules like allOrNothingRules plus a fractional cost, wildcards, nesting,
// share_threshold, replaces and a tenant key, in domains "all" (allOrNothing),
// "plain" and "tenants".
func fuzzRules(t testing.TB) *descriptors.Set {
	t.Helper()
	rules := []descriptors.Descriptor{
		{Key: "a", Limit: hour(5, descriptors.FixedWindow)},
		{Key: "one", Limit: hour(1, descriptors.FixedWindow)},
		{Key: "sw", Limit: hour(3, descriptors.SlidingWindow)},
		{Key: "tb", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 2, Algorithm: descriptors.TokenBucket, Burst: 4000}},
		{Key: "free", Limit: &descriptors.Limit{Unlimited: true}},
		{Key: "shadow", ShadowMode: true, Limit: hour(1, descriptors.FixedWindow)},
		{Key: "q1", QuotaMode: true, Limit: hour(1, descriptors.FixedWindow)},
		{Key: "q2", QuotaMode: true, Limit: hour(1, descriptors.SlidingWindow)},
		{Key: "qfree", QuotaMode: true, Limit: &descriptors.Limit{Unlimited: true}},
		{Key: "half", Limit: &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 2, Cost: 500}},
		{Key: "wild", Value: "x*", Limit: hour(2, descriptors.FixedWindow)},
		{Key: "share", Value: "s*", ShareThreshold: true, Limit: hour(2, descriptors.SlidingWindow)},
		{Key: "repl", Limit: &descriptors.Limit{Unit: descriptors.Day, RequestsPerUnit: 9, Replaces: []string{"named"}}},
		{Key: "user", Limit: &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 3, Name: "named"},
			Descriptors: []descriptors.Descriptor{{Key: "plan", Limit: hour(4, descriptors.TokenBucket)}}},
	}
	return mustSet(t, descriptors.DomainConfig{Name: "all", AllOrNothing: true, Descriptors: rules},
		descriptors.DomainConfig{Name: "plain", Descriptors: rules},
		descriptors.DomainConfig{Name: "tenants", TenantKey: "plan", AllOrNothing: true, Descriptors: rules})
}

// fuzzInput reads a request from fuzz bytes; reads past the end give 0.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

func (in *fuzzInput) uint64() uint64 {
	var buf [8]byte
	n := copy(buf[:], in.b)
	in.b = in.b[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

// string reads a length byte and that many bytes; length 255 stands for a
// 5000-byte string, past the entry size limit.
func (in *fuzzInput) string() string {
	n := int(in.byte())
	if n == 255 {
		return strings.Repeat("v", 5000)
	}
	n = min(n, len(in.b))
	s := string(in.b[:n])
	in.b = in.b[n:]
	return s
}

func (in *fuzzInput) key() string {
	if c := in.byte(); c < 200 {
		return fuzzKeys[int(c)%len(fuzzKeys)]
	}
	return in.string()
}

func (in *fuzzInput) request() *limiter.Request[descriptors.Entry] {
	r := &limiter.Request[descriptors.Entry]{}
	switch in.byte() % 5 {
	case 0:
		r.Domain = "all"
	case 1:
		r.Domain = "plain"
	case 2:
		r.Domain = "tenants"
	case 3:
		r.Domain = in.string()
	}
	switch in.byte() % 4 {
	case 1:
		r.HitsAddend = 1
	case 2:
		r.HitsAddend = math.MaxUint32
	case 3:
		r.HitsAddend = uint32(in.uint64())
	}
	r.Descriptors = make([]limiter.Descriptor[descriptors.Entry], int(in.byte())%20)
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		d.Entries = make([]descriptors.Entry, int(in.byte())%10)
		for j := range d.Entries {
			d.Entries[j] = descriptors.Entry{Key: in.key(), Value: in.string()}
		}
		if c := in.byte(); c%8 == 1 {
			d.Override = &limiter.Override{RequestsPerUnit: uint32(in.uint64()), Unit: descriptors.Unit(in.byte() % 10)}
		}
		switch in.byte() % 5 {
		case 1:
			d.HasHits = true
		case 2:
			d.Hits, d.HasHits = math.MaxUint64, true
		case 3:
			d.Hits, d.HasHits = in.uint64(), true
		}
	}
	return r
}

// FuzzCheck decides random requests, well-formed or not, on the memory
// store, with and without Options.AllOrNothing: Check never panics, fails only
// with ErrInvalid, answers one status per descriptor, and never answers
// OK for hits beyond a limit's capacity.
func FuzzCheck(f *testing.F) {
	f.Add([]byte{0, 1, 2, 1, 0, 5, 0, 0, 0})                                                // all: a, a
	f.Add([]byte{1, 2, 3, 1, 1, 1, 'v', 0, 0, 1, 3, 1, 'v', 0, 0})                          // plain, hits 2^32-1
	f.Add([]byte{0, 0, 2, 1, 6, 1, 'v', 0, 2, 1, 7, 1, 'v', 0, 2})                          // quota, hits 2^64-1
	f.Add([]byte{2, 0, 2, 2, 14, 1, 'u', 13, 2, 'p', 'r', 0, 0, 1, 12, 0, 0, 0})            // tenants, nested, replaces
	f.Add([]byte{0, 0, 1, 1, 0, 255, 0, 0})                                                 // a 5000-byte value
	f.Add([]byte{0, 0, 1, 0, 0, 0})                                                         // no entries
	f.Add([]byte{3, 3, 'n', 'o', 'p', 0, 1, 1, 0, 1, 'x', 1, 9, 0, 0, 0, 0, 0, 0, 0, 9, 0}) // unknown domain
	f.Add([]byte{0, 0, 1, 1, 0, 1, 'v', 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0})                   // override, unit UNKNOWN
	f.Add([]byte{0, 0, 1, 1, 201, 3, '\xff', '\xfe', ':', 1, '\n', 0, 0})                   // invalid UTF-8, raw key
	limits := &limiter.Limits{MaxDescriptors: 16, MaxEntries: 8, MaxEntryBytes: 1024}
	rules := fuzzRules(f)
	var ls [2]*limiter.Limiter
	for i := range ls {
		m := store.NewMemory(store.MemoryOptions{})
		f.Cleanup(func() { _ = m.Close() })
		ls[i] = limiter.New(m, limiter.Options{Limits: limits, AllOrNothing: i == 1})
		ls[i].SetRules(rules)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		l := ls[in.byte()%2]
		req := in.request()
		resp, err := limiter.Check(context.Background(), l, req)
		if err != nil {
			if !errors.Is(err, limiter.ErrInvalid) {
				t.Fatalf("Check = %v, want nil or ErrInvalid", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		overall := limiter.OK
		for i, st := range resp.Statuses {
			if st.Code == limiter.OverLimit && !st.Quota {
				overall = limiter.OverLimit
			}
			lim := st.Limit
			if lim == nil || lim.Unlimited || st.Shadowed || st.Code == limiter.OverLimit {
				continue
			}
			// hits * cost > capacity must be over, however large hits is.
			capacity := lim.Capacity()
			if lim.Algorithm == descriptors.TokenBucket {
				capacity = lim.Burst
			}
			if st.Hits > uint64(capacity/lim.Cost) {
				t.Fatalf("descriptor %d: %d hits of cost %d against %d answered OK", i, st.Hits, lim.Cost, capacity)
			}
		}
		if overall == limiter.OverLimit && resp.Code != limiter.OverLimit {
			t.Fatalf("a descriptor is over but the request is %v", resp.Code)
		}
	})
}
