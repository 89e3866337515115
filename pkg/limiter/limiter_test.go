package limiter_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestCheckIntoReusesResponse decides the same requests with Check and,
// on a twin limiter, with CheckInto on one response dirtied by earlier
// answers: the answers match, and the response's statuses are reused.
func TestCheckIntoReusesResponse(t *testing.T) {
	set := mustSet(t, descriptors.DomainConfig{Name: "d", Descriptors: []descriptors.Descriptor{
		{Key: "k", Limit: &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 2}},
		{Key: "q", QuotaMode: true, Limit: &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 1}},
		{Key: "s", ShadowMode: true, Limit: &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 1}},
	}})
	var twins [2]*limiter.Limiter
	for i := range twins {
		m := store.NewMemory(store.MemoryOptions{})
		t.Cleanup(func() { _ = m.Close() })
		twins[i] = limiter.New(m, limiter.Options{})
		twins[i].SetRules(set)
	}
	req := func(domain string, keys ...string) *limiter.Request[descriptors.Entry] {
		r := &limiter.Request[descriptors.Entry]{Domain: domain}
		for _, k := range keys {
			r.Descriptors = append(r.Descriptors, limiter.Descriptor[descriptors.Entry]{Entries: []descriptors.Entry{{Key: k, Value: "v"}}})
		}
		return r
	}
	// timeless drops the fields that depend on the instant of the call.
	timeless := func(sts []limiter.Status) []limiter.Status {
		out := append([]limiter.Status(nil), sts...)
		for i := range out {
			out[i].ResetMillis, out[i].RetryAfterMillis = 0, 0
		}
		return out
	}
	ctx := context.Background()
	reused := &limiter.Response{Statuses: make([]limiter.Status, 0, 8)}
	backing := &reused.Statuses[:1][0]
	for i, r := range []*limiter.Request[descriptors.Entry]{
		req("d", "k", "q", "s", "none"),
		req("d", "k", "q", "s"),
		req("d", "k", "q", "s"), // k over, q over, s shadowed
		req("other", "k"),       // no such domain
		req("d", "none", "none"),
		req("d", "k"),
	} {
		want, err := limiter.Check(ctx, twins[0], r)
		if err != nil {
			t.Fatal(err)
		}
		if err := limiter.CheckInto(ctx, twins[1], r, reused); err != nil {
			t.Fatal(err)
		}
		if reused.Code != want.Code || !reflect.DeepEqual(timeless(reused.Statuses), timeless(want.Statuses)) {
			t.Fatalf("request %d: CheckInto = %v %+v, Check = %v %+v", i, reused.Code, reused.Statuses, want.Code, want.Statuses)
		}
		if &reused.Statuses[0] != backing {
			t.Fatalf("request %d: statuses reallocated", i)
		}
	}
}

// TestDescriptorWithoutEntries: a descriptor with no entries is answered
// on its own, as envoyproxy/ratelimit does: OK without a limit, while the
// request's other descriptors are decided as usual; with a limit
// override, the override applies to one key of the domain. Plain and
// all-or-nothing requests alike.
func TestDescriptorWithoutEntries(t *testing.T) {
	set := mustSet(t, descriptors.DomainConfig{Name: "d", Descriptors: []descriptors.Descriptor{
		{Key: "k", Limit: &descriptors.Limit{Unit: descriptors.Hour, RequestsPerUnit: 1}},
	}})
	type want struct {
		overall limiter.Code
		codes   []limiter.Code
		limited []bool // a limit applied
	}
	empty := limiter.Descriptor[descriptors.Entry]{}
	override := limiter.Descriptor[descriptors.Entry]{Override: &limiter.Override{RequestsPerUnit: 1, Unit: descriptors.Hour}}
	k := limiter.Descriptor[descriptors.Entry]{Entries: []descriptors.Entry{{Key: "k", Value: "v"}}}
	steps := []struct {
		name  string
		descs []limiter.Descriptor[descriptors.Entry]
		want  want
	}{
		{"alone", []limiter.Descriptor[descriptors.Entry]{empty}, want{limiter.OK, []limiter.Code{limiter.OK}, []bool{false}}},
		{"beside a limited one", []limiter.Descriptor[descriptors.Entry]{empty, k},
			want{limiter.OK, []limiter.Code{limiter.OK, limiter.OK}, []bool{false, true}}},
		{"the limited one is enforced", []limiter.Descriptor[descriptors.Entry]{empty, k},
			want{limiter.OverLimit, []limiter.Code{limiter.OK, limiter.OverLimit}, []bool{false, true}}},
		{"override, first hit", []limiter.Descriptor[descriptors.Entry]{override},
			want{limiter.OK, []limiter.Code{limiter.OK}, []bool{true}}},
		{"override, second hit", []limiter.Descriptor[descriptors.Entry]{override, empty},
			want{limiter.OverLimit, []limiter.Code{limiter.OverLimit, limiter.OK}, []bool{true, false}}},
	}
	for _, allOrNothing := range []bool{false, true} {
		m := store.NewMemory(store.MemoryOptions{})
		t.Cleanup(func() { _ = m.Close() })
		l := limiter.New(m, limiter.Options{AllOrNothing: allOrNothing})
		l.SetRules(set)
		for _, s := range steps {
			resp, err := limiter.Check(context.Background(), l, &limiter.Request[descriptors.Entry]{Domain: "d", Descriptors: s.descs})
			if err != nil {
				t.Fatalf("allOrNothing %v, %s: %v", allOrNothing, s.name, err)
			}
			got := want{overall: resp.Code}
			for _, st := range resp.Statuses {
				got.codes = append(got.codes, st.Code)
				got.limited = append(got.limited, st.Limit != nil)
			}
			if !reflect.DeepEqual(got, s.want) {
				t.Errorf("allOrNothing %v, %s: %+v, want %+v", allOrNothing, s.name, got, s.want)
			}
		}
	}
}
