package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// allOrNothingNow is the memory store's clock in these tests: mid-hour, so that
// hour windows do not roll over.
var allOrNothingNow = time.UnixMilli(1_750_000_000_000 + 30*60_000)

// allOrNothingRules are the rules of domain "all" (atomic: true) and "plain"
// (the same rules, decided descriptor by descriptor).
func allOrNothingRules(t testing.TB) *descriptors.Set {
	t.Helper()
	rules := []descriptors.Descriptor{
		{Key: "a", Limit: hour(5, descriptors.FixedWindow)},
		{Key: "one", Limit: hour(1, descriptors.FixedWindow)},
		{Key: "sw", Limit: hour(3, descriptors.SlidingWindow)},
		{Key: "tb", Limit: hour(2, descriptors.TokenBucket)},
		{Key: "free", Limit: &descriptors.Limit{Unlimited: true}},
		{Key: "shadow", ShadowMode: true, Limit: hour(1, descriptors.FixedWindow)},
		{Key: "q1", QuotaMode: true, Limit: hour(1, descriptors.FixedWindow)},
		{Key: "q2", QuotaMode: true, Limit: hour(1, descriptors.FixedWindow)},
		{Key: "qfree", QuotaMode: true, Limit: &descriptors.Limit{Unlimited: true}},
		{Key: "big", Limit: hour(100, descriptors.FixedWindow)},
		{Key: "small", Limit: hour(50, descriptors.TokenBucket)},
	}
	return mustSet(t, descriptors.DomainConfig{Name: "all", AllOrNothing: true, Descriptors: rules},
		descriptors.DomainConfig{Name: "plain", Descriptors: rules})
}

// hour is a limit of rpu an hour with alg.
func hour(rpu uint32, alg descriptors.Algorithm) *descriptors.Limit {
	return &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: rpu, Algorithm: alg}
}

// newAllOrNothingLimiter returns a limiter with allOrNothingRules on a fresh memory
// store, and the store.
func newAllOrNothingLimiter(t testing.TB, opts limiter.Options) (*limiter.Limiter, *store.Memory) {
	t.Helper()
	m := store.NewMemory(store.MemoryOptions{Now: func() time.Time { return allOrNothingNow }})
	t.Cleanup(func() { _ = m.Close() })
	l := limiter.New(m, opts)
	l.SetRules(allOrNothingRules(t))
	return l, m
}

// req builds a request of one descriptor per key, each {key: "v"}.
func req(domain string, keys ...string) *limiter.Request[descriptors.Entry] {
	r := &limiter.Request[descriptors.Entry]{Domain: domain}
	for _, k := range keys {
		r.Descriptors = append(r.Descriptors, limiter.Descriptor[descriptors.Entry]{Entries: []descriptors.Entry{{Key: k, Value: "v"}}})
	}
	return r
}

func check(t *testing.T, l *limiter.Limiter, r *limiter.Request[descriptors.Entry]) *limiter.Response {
	t.Helper()
	resp, err := limiter.Check(context.Background(), l, r)
	if err != nil {
		t.Fatalf("Check(%s %d descriptors): %v", r.Domain, len(r.Descriptors), err)
	}
	return resp
}

// peek returns the status of key in domain without charging it.
func peek(t *testing.T, l *limiter.Limiter, domain, key string) limiter.Status {
	t.Helper()
	r := req(domain, key)
	r.Descriptors[0].HasHits = true
	return check(t, l, r).Statuses[0]
}

// codes lists a response's statuses' codes.
func codes(resp *limiter.Response) []limiter.Code {
	out := make([]limiter.Code, len(resp.Statuses))
	for i, st := range resp.Statuses {
		out[i] = st.Code
	}
	return out
}

func wantCodes(t *testing.T, what string, resp *limiter.Response, overall limiter.Code, each ...limiter.Code) {
	t.Helper()
	got := codes(resp)
	same := resp.Code == overall && len(got) == len(each)
	for i := range each {
		same = same && got[i] == each[i]
	}
	if !same {
		t.Errorf("%s: %v %v, want %v %v", what, resp.Code, got, overall, each)
	}
}

const (
	ok   = limiter.OK
	over = limiter.OverLimit
)

// TestAllOrNothingRejectChargesNothing: in an all-or-nothing domain a request with one
// descriptor over its limit charges none, fixed windows included; in a
// plain domain the others are charged and the fixed window counts the
// denied hit, as envoyproxy/ratelimit does.
func TestAllOrNothingRejectChargesNothing(t *testing.T) {
	for _, others := range [][]string{{"a"}, {"sw", "tb"}, {"a", "sw", "tb"}} {
		l, _ := newAllOrNothingLimiter(t, limiter.Options{})
		for _, domain := range []string{"all", "plain"} {
			keys := append([]string{"one"}, others...)
			first := check(t, l, req(domain, keys...))
			wantCodes(t, domain+" first", first, ok, repeat(ok, len(keys))...)
			second := check(t, l, req(domain, keys...))
			wantCodes(t, domain+" second", second, over, append([]limiter.Code{over}, repeat(ok, len(others))...)...)
			for i, k := range others {
				// The would-be remaining: what a commit would have left.
				if got, want := second.Statuses[i+1].Remaining, first.Statuses[i+1].Remaining-1; got != want {
					t.Errorf("%s %s: second request reports %d left, want %d", domain, k, got, want)
				}
				charged := 2
				if domain == "all" {
					charged = 1
				}
				if got, want := peek(t, l, domain, k).Remaining, first.Statuses[i+1].Remaining+1-uint32(charged); got != want {
					t.Errorf("%s %s: %d left after two requests, want %d (%d charged)", domain, k, got, want, charged)
				}
			}
			// "one" is a fixed window: plain counted the denied hit (2 of 1),
			// all-or-nothing did not (1 of 1, so a peek still passes).
			wantOne := map[string]limiter.Code{"all": ok, "plain": over}[domain]
			if st := peek(t, l, domain, "one"); st.Code != wantOne {
				t.Errorf("%s: peek of the used-up fixed window = %v, want %v", domain, st.Code, wantOne)
			}
		}
	}
}

func repeat(c limiter.Code, n int) []limiter.Code {
	out := make([]limiter.Code, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// TestAllOrNothingOption: Options.AllOrNothing makes every domain all or nothing.
func TestAllOrNothingOption(t *testing.T) {
	l, _ := newAllOrNothingLimiter(t, limiter.Options{AllOrNothing: true})
	check(t, l, req("plain", "one", "a"))
	wantCodes(t, "second", check(t, l, req("plain", "one", "a")), over, over, ok)
	if got := peek(t, l, "plain", "a").Remaining; got != 4 {
		t.Errorf("a: %d left, want 4: the rejected request charged it", got)
	}
}

// TestAllOrNothingShadowAndQuota: a request commits exactly when its answer is
// OK: a shadowed descriptor over its limit does not stop it, nor does a
// quota descriptor over its limit while another quota descriptor is not.
func TestAllOrNothingShadowAndQuota(t *testing.T) {
	t.Run("shadow", func(t *testing.T) {
		l, _ := newAllOrNothingLimiter(t, limiter.Options{})
		check(t, l, req("all", "a", "shadow"))
		resp := check(t, l, req("all", "a", "shadow"))
		wantCodes(t, "second", resp, ok, ok, ok)
		if !resp.Statuses[1].Shadowed {
			t.Error("the shadow descriptor is not reported shadowed")
		}
		if got := peek(t, l, "all", "a").Remaining; got != 3 {
			t.Errorf("a: %d left, want 3: both requests answered OK", got)
		}
	})
	for _, tc := range []struct {
		name          string
		first, second []string // the keys of the two requests
		want          []limiter.Code
		left          map[string]uint32 // remaining after the second
	}{
		{"one quota over", []string{"q1"}, []string{"a", "q1", "q2"}, []limiter.Code{ok, ok, over, ok},
			map[string]uint32{"a": 4, "q2": 0}}, // answered OK
		{"every quota over", []string{"q1", "q2"}, []string{"a", "q1", "q2"}, []limiter.Code{over, ok, over, over},
			map[string]uint32{"a": 5}}, // answered OVER_LIMIT
		{"unlimited quota", []string{"q1"}, []string{"a", "q1", "qfree"}, []limiter.Code{ok, ok, over, ok},
			map[string]uint32{"a": 4}}, // answered OK
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newAllOrNothingLimiter(t, limiter.Options{})
			check(t, l, req("all", tc.first...))
			wantCodes(t, "second", check(t, l, req("all", tc.second...)), tc.want[0], tc.want[1:]...)
			for key, want := range tc.left {
				if got := peek(t, l, "all", key).Remaining; got != want {
					t.Errorf("%s: %d left, want %d", key, got, want)
				}
			}
		})
	}
}

// TestAllOrNothingUnlimitedAndUnmatched: descriptors without a store decision
// take no part; a descriptor repeated in one request counts twice.
func TestAllOrNothingUnlimitedAndUnmatched(t *testing.T) {
	l, _ := newAllOrNothingLimiter(t, limiter.Options{})
	resp := check(t, l, req("all", "free", "nomatch", "a"))
	wantCodes(t, "free, unmatched, a", resp, ok, ok, ok, ok)
	if resp.Statuses[0].Remaining != math.MaxUint32 || resp.Statuses[1].Limit != nil || resp.Statuses[2].Remaining != 4 {
		t.Errorf("statuses %+v", resp.Statuses)
	}
	wantCodes(t, "one twice", check(t, l, req("all", "free", "one", "one")), over, ok, ok, over)
	if st := peek(t, l, "all", "one"); st.Code != ok || st.Remaining != 1 {
		t.Errorf("one after a rejected request = %v with %d left, want untouched", st.Code, st.Remaining)
	}
}

// TestAllOrNothingPeeks: a request of checks without counting writes nothing,
// and a check of a window already over is over in every domain.
func TestAllOrNothingPeeks(t *testing.T) {
	l, m := newAllOrNothingLimiter(t, limiter.Options{})
	for range 3 {
		if st := peek(t, l, "all", "one"); st.Code != ok || st.Remaining != 1 {
			t.Errorf("peek = %v, %d left", st.Code, st.Remaining)
		}
	}
	if n := m.Len(); n != 0 {
		t.Errorf("peeks wrote %d entries", n)
	}
	check(t, l, req("plain", "one"))
	check(t, l, req("plain", "one")) // the fixed window counts it: 2 of 1
	if st := peek(t, l, "plain", "one"); st.Code != over {
		t.Errorf("peek of an over fixed window = %v", st.Code)
	}
}

// TestAllOrNothingHitsOverflow: hits_addend 2^32-1 and a descriptor's
// hits_addend 2^64-1 saturate: OVER_LIMIT, never OK, and nothing wraps.
func TestAllOrNothingHitsOverflow(t *testing.T) {
	l, _ := newAllOrNothingLimiter(t, limiter.Options{})
	for _, domain := range []string{"all", "plain"} {
		for _, keys := range [][]string{{"a"}, {"sw"}, {"tb"}, {"a", "sw", "tb"}} {
			r := req(domain, keys...)
			r.HitsAddend = math.MaxUint32
			resp := check(t, l, r)
			wantCodes(t, domain+" hits_addend 2^32-1", resp, over, repeat(over, len(keys))...)
			r = req(domain, keys...)
			for i := range r.Descriptors {
				r.Descriptors[i].Hits, r.Descriptors[i].HasHits = math.MaxUint64, true
			}
			resp = check(t, l, r)
			wantCodes(t, domain+" descriptor hits_addend 2^64-1", resp, over, repeat(over, len(keys))...)
			for i, st := range resp.Statuses {
				if st.Hits != math.MaxUint64 || st.Remaining > st.Limit.RequestsPerUnit {
					t.Errorf("%s %s: hits %d, remaining %d", domain, keys[i], st.Hits, st.Remaining)
				}
			}
		}
		// Sliding windows and buckets never charge a denied hit: they are
		// untouched. The fixed window saturates at 2^52 in the plain domain
		// and is untouched in the all-or-nothing one.
		for _, k := range []string{"sw", "tb"} {
			if st := peek(t, l, domain, k); st.Code != ok || st.Remaining != st.Limit.RequestsPerUnit {
				t.Errorf("%s %s after huge hits: %v with %d left", domain, k, st.Code, st.Remaining)
			}
		}
		wantA := map[string]limiter.Code{"all": ok, "plain": over}[domain]
		if st := peek(t, l, domain, "a"); st.Code != wantA {
			t.Errorf("%s a after huge hits: %v, want %v", domain, st.Code, wantA)
		}
	}
}

// plainStore hides a store's TakeAll.
type plainStore struct{ limiter.Store }

// TestAllOrNothingNeedsAllOrNothingStore: without an AllOrNothingStore, all-or-nothing domains fail
// with ErrNotAllOrNothing and plain ones work.
func TestAllOrNothingNeedsAllOrNothingStore(t *testing.T) {
	m := store.NewMemory(store.MemoryOptions{})
	l := limiter.New(plainStore{m}, limiter.Options{})
	l.SetRules(allOrNothingRules(t))
	_, err := limiter.Check(context.Background(), l, req("all", "a"))
	if !errors.Is(err, limiter.ErrNotAllOrNothing) || errors.Is(err, limiter.ErrInvalid) {
		t.Errorf("all-or-nothing domain on a plain store: %v, want ErrNotAllOrNothing", err)
	}
	check(t, l, req("plain", "a"))
}

// TestAllOrNothingDomainKeys: an all-or-nothing domain's counters live under
// AppendAllOrNothingKey's keys.
func TestAllOrNothingDomainKeys(t *testing.T) {
	l, m := newAllOrNothingLimiter(t, limiter.Options{})
	check(t, l, req("all", "a"))
	entries := []descriptors.Entry{{Key: "a", Value: "v"}}
	lim := descriptors.Match(allOrNothingRules(t).Domain("all"), entries)
	op := limiter.Op{Algorithm: descriptors.FixedWindow, Limit: lim.Capacity(), Window: lim.WindowMillis()}
	res := make([]limiter.Result, 2)
	ops := []limiter.Op{op, op}
	ops[0].Key = string(limiter.AppendAllOrNothingKey(nil, "ratelimit", "all", lim, entries, limiter.DefaultTenant))
	ops[1].Key = string(limiter.AppendKey(nil, "ratelimit", "all", lim, entries, limiter.DefaultTenant))
	if err := m.Take(context.Background(), ops, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 4000 || res[1].Remaining != 5000 {
		t.Errorf("all-or-nothing key has %d left, plain key %d; want the charge under the all-or-nothing key", res[0].Remaining, res[1].Remaining)
	}
}

// TestAllOrNothingConcurrent races requests for "big" (100 per hour) and
// "small" (50): exactly 50 answer OK, and big is charged by those only.
func TestAllOrNothingConcurrent(t *testing.T) {
	l, _ := newAllOrNothingLimiter(t, limiter.Options{})
	var oks atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			keys := []string{"big", "small"}
			if w%2 == 1 {
				keys = []string{"small", "big"}
			}
			for range 20 {
				resp, err := limiter.Check(context.Background(), l, req("all", keys...))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Code == ok {
					oks.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := oks.Load(); n != 50 {
		t.Errorf("%d requests OK, want 50", n)
	}
	if got := peek(t, l, "all", "big").Remaining; got != 50 {
		t.Errorf("big: %d left, want 50", got)
	}
}

// BenchmarkCheckAllOrNothing compares a decision of an all-or-nothing domain with the
// same decision in a plain domain, on the memory store.
func BenchmarkCheckAllOrNothing(b *testing.B) {
	for _, domain := range []string{"plain", "all"} {
		for _, keys := range [][]string{{"big"}, {"big", "a", "sw"}} {
			b.Run(fmt.Sprintf("%s/descriptors=%d", domain, len(keys)), func(b *testing.B) {
				m := store.NewMemory(store.MemoryOptions{})
				b.Cleanup(func() { _ = m.Close() })
				l := limiter.New(m, limiter.Options{})
				l.SetRules(allOrNothingRules(b))
				r := req(domain, keys...)
				for i := range r.Descriptors {
					r.Descriptors[i].HasHits = true // peeks: nothing runs out
				}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := limiter.Check(ctx, l, r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
