package descriptors_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// lim returns a limit of one request per second.
func lim() *descriptors.Limit {
	return &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 1}
}

type ds = []descriptors.Descriptor

// rules exercises every matching rule; each limit is identified by its Path.
func rules() []descriptors.DomainConfig {
	return []descriptors.DomainConfig{{
		Name: "d",
		Descriptors: ds{
			{Key: "k", Limit: lim()},
			{Key: "k", Value: "v*", Limit: lim()},
			{Key: "k", Value: "va*", Limit: lim()}, // shadowed by the earlier v*
			{Key: "k", Value: "val", Limit: lim()},
			{Key: "k", Value: "wx*", Limit: lim()},
			{Key: "k", Value: "w*", Limit: lim()}, // after wx*: wins only where wx* fails
			{Key: "pre", Value: "*.example.com", Limit: lim()},
			{Key: "mid", Value: "/api/*/users", Limit: lim()},
			{Key: "multi", Value: "a*b*c", Limit: lim()},
			{Key: "any", Value: "*", Limit: lim()},
			{Key: "ek", Limit: lim()},
			{Key: "nest", Value: "x", Descriptors: ds{
				{Key: "sub", Limit: lim()},
				{Key: "sub", Value: "y", Descriptors: ds{
					{Key: "deep", Limit: lim()},
				}},
			}},
			{Key: "own", Value: "x", Limit: lim(), Descriptors: ds{
				{Key: "sub", Limit: lim()},
			}},
			{Key: "keyonly", Descriptors: ds{
				{Key: "inner", Descriptors: ds{
					{Key: "leaf", Limit: lim()},
				}},
			}},
			{Key: "unl", Limit: &descriptors.Limit{Unlimited: true}},
			{Key: "share", Value: "/p/*", ShareThreshold: true, Descriptors: ds{
				{Key: "user", Limit: lim()},
				{Key: "item", Value: "i*", ShareThreshold: true, Limit: lim()},
			}},
		},
	}, {
		Name:        "other",
		Descriptors: ds{{Key: "k", Value: "val", Limit: lim()}},
	}}
}

func newSet(t testing.TB, domains []descriptors.DomainConfig) *descriptors.Set {
	t.Helper()
	s, err := descriptors.NewSet(domains)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func e(kv ...string) []descriptors.Entry {
	var es []descriptors.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestMatch(t *testing.T) {
	s := newSet(t, rules())
	for _, c := range []struct {
		name    string
		domain  string
		entries []descriptors.Entry
		want    string // the matched limit's Path; "" for none
	}{
		{"exact beats wildcard", "d", e("k", "val"), "d.k_val"},
		{"wildcard beats key only", "d", e("k", "vx"), "d.k_v*"},
		{"key only when nothing else matches", "d", e("k", "zzz"), "d.k"},
		{"first wildcard in file order wins", "d", e("k", "vabc"), "d.k_v*"},
		{"earlier narrower wildcard wins", "d", e("k", "wxy"), "d.k_wx*"},
		{"later wildcard where the earlier fails", "d", e("k", "wy"), "d.k_w*"},
		{"suffix star matches zero chars", "d", e("k", "v"), "d.k_v*"},
		{"prefix star", "d", e("pre", "api.example.com"), "d.pre_*.example.com"},
		{"prefix star matches zero chars", "d", e("pre", ".example.com"), "d.pre_*.example.com"},
		{"prefix star mismatch", "d", e("pre", "example.com"), ""},
		{"middle star", "d", e("mid", "/api/v1/users"), "d.mid_/api/*/users"},
		{"middle star matches zero chars", "d", e("mid", "/api//users"), "d.mid_/api/*/users"},
		{"middle star mismatch", "d", e("mid", "/api/v1/groups"), ""},
		{"prefix and suffix may not overlap", "d", e("mid", "/api/users"), ""},
		{"several stars", "d", e("multi", "axxbyyc"), "d.multi_a*b*c"},
		{"several stars, zero chars each", "d", e("multi", "abc"), "d.multi_a*b*c"},
		{"several stars out of order", "d", e("multi", "acb"), ""},
		{"lone star", "d", e("any", "anything"), "d.any_*"},
		{"lone star matches an empty value", "d", e("any", ""), "d.any_*"},
		{"key only matches an empty value", "d", e("ek", ""), "d.ek"},
		{"keys are case-sensitive", "d", e("K", "val"), ""},
		{"values are case-sensitive", "d", e("k", "VAL"), "d.k"},
		{"unknown key", "d", e("nope", "x"), ""},
		{"shorter request, node without limit", "d", e("nest", "x"), ""},
		{"nested key only", "d", e("nest", "x", "sub", "z"), "d.nest_x.sub"},
		{"exact without limit beats key only", "d", e("nest", "x", "sub", "y"), ""},
		{"three levels", "d", e("nest", "x", "sub", "y", "deep", "q"), "d.nest_x.sub_y.deep"},
		{"longer request than a leaf", "d", e("nest", "x", "sub", "z", "deep", "q"), ""},
		{"shorter request, node's own limit", "d", e("own", "x"), "d.own_x"},
		{"child of a limited node", "d", e("own", "x", "sub", "s"), "d.own_x.sub"},
		{"longer request than the rules", "d", e("own", "x", "sub", "s", "more", "m"), ""},
		{"longer request than a top leaf", "d", e("k", "val", "extra", "1"), ""},
		{"key-only levels", "d", e("keyonly", "a", "inner", "b", "leaf", "c"), "d.keyonly.inner.leaf"},
		{"key-only levels, short", "d", e("keyonly", "a", "inner", "b"), ""},
		{"unlimited", "d", e("unl", "x"), "d.unl"},
		{"shared wildcard", "d", e("share", "/p/a", "user", "u"), "d.share_/p/*.user"},
		{"other domain", "other", e("k", "val"), "other.k_val"},
		{"other domain has its own rules", "other", e("k", "vx"), ""},
		{"no domain", "missing", e("k", "val"), ""},
		{"no entries", "d", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := descriptors.Match(s.Domain(c.domain), c.entries)
			got := ""
			if l != nil {
				got = l.Path
			}
			if got != c.want {
				t.Errorf("Match(%s, %v) = %q, want %q", c.domain, c.entries, got, c.want)
			}
		})
	}
	if descriptors.Match[descriptors.Entry](nil, e("k", "val")) != nil {
		t.Error("Match(nil domain) != nil")
	}
}

func TestMatchUnlimited(t *testing.T) {
	s := newSet(t, rules())
	if l := descriptors.Match(s.Domain("d"), e("unl", "x")); l == nil || !l.Unlimited {
		t.Errorf("unl = %+v, want unlimited", l)
	}
}

func TestSharedValue(t *testing.T) {
	d := newSet(t, rules()).Domain("d")
	for _, c := range []struct {
		entries []descriptors.Entry
		want    []string // per depth; "" for the request's own value
	}{
		{e("share", "/p/a", "user", "u"), []string{"/p/*", ""}},
		{e("share", "/p/a", "item", "i9"), []string{"/p/*", "i*"}},
		{e("k", "vx"), []string{""}},
		{e("any", "x"), []string{""}},
	} {
		l := descriptors.Match(d, c.entries)
		if l == nil {
			t.Fatalf("%v: no limit", c.entries)
		}
		for i, want := range append(c.want, "", "") {
			got, ok := l.SharedValue(i)
			if got != want || ok != (want != "") {
				t.Errorf("%v: SharedValue(%d) = %q, %v; want %q", c.entries, i, got, ok, want)
			}
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	d := newSet(t, rules()).Domain("d")
	requests := [][]descriptors.Entry{
		e("k", "val"), e("k", "vabc"), e("k", "zzz"), e("mid", "/api/v1/users"),
		e("nest", "x", "sub", "y", "deep", "q"), e("own", "x", "sub", "s", "more", "m"), e("nope", ""),
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, r := range requests {
			descriptors.Match(d, r)
		}
	})
	if allocs != 0 {
		t.Errorf("Match allocates %v times per run", allocs)
	}
}

func TestNewSetCopiesLimits(t *testing.T) {
	meta := map[string]any{"team": "a"}
	in := &descriptors.Limit{Name: "n", Unit: descriptors.Minute, RequestsPerUnit: 7, Algorithm: descriptors.TokenBucket}
	dcs := []descriptors.DomainConfig{{Name: "d", TenantKey: "plan", AllOrNothing: true, Descriptors: ds{{
		Key: "k", Value: "v", Limit: in, Metadata: meta,
		ShadowMode: true, QuotaMode: true, DetailedMetric: true, ValueToMetric: true,
	}}}}
	s := newSet(t, dcs)
	in.RequestsPerUnit = 99
	d := s.Domain("d")
	if d.Name != "d" || d.TenantKey != "plan" || !d.AllOrNothing {
		t.Errorf("domain = %+v", d)
	}
	l := descriptors.Match(d, e("k", "v"))
	want := descriptors.Limit{
		Name: "n", Unit: descriptors.Minute, RequestsPerUnit: 7, UnitMultiplier: 1,
		Algorithm: descriptors.TokenBucket, Burst: 7 * descriptors.Milli, Cost: descriptors.Milli,
		ShadowMode: true, QuotaMode: true, DetailedMetric: true, ValueToMetric: true,
		Metadata: meta, Path: "d.k_v",
	}
	if l.Name != want.Name || l.RequestsPerUnit != 7 || l.UnitMultiplier != 1 || l.Burst != want.Burst ||
		l.Cost != want.Cost || !l.ShadowMode || !l.QuotaMode || !l.DetailedMetric || !l.ValueToMetric ||
		!reflect.DeepEqual(l.Metadata, meta) || l.Path != want.Path {
		t.Errorf("limit = %+v\nwant %+v", *l, want)
	}
	if got := s.Limits(); len(got) != 1 || got[0] != l {
		t.Errorf("Limits() = %v, want [%p]", got, l)
	}
}

func TestSetDomains(t *testing.T) {
	s := newSet(t, rules())
	if got := s.Domains(); !reflect.DeepEqual(got, []string{"d", "other"}) {
		t.Errorf("Domains() = %v", got)
	}
	if got := len(s.Limits()); got != 20 {
		t.Errorf("%d limits, want 20", got)
	}
	var nilSet *descriptors.Set
	if nilSet.Domain("d") != nil {
		t.Error("nil Set has a domain")
	}
}

func TestNewSetErrors(t *testing.T) {
	dom := func(d ...descriptors.Descriptor) []descriptors.DomainConfig {
		return []descriptors.DomainConfig{{Name: "d", Source: "d.yaml:1", Descriptors: d}}
	}
	at := func(d descriptors.Descriptor) descriptors.Descriptor {
		d.Source = "d.yaml:9"
		return d
	}
	withLimit := func(f func(*descriptors.Limit)) *descriptors.Limit {
		l := lim()
		f(l)
		return l
	}
	for _, c := range []struct {
		name    string
		domains []descriptors.DomainConfig
		want    string
		is      error
	}{
		{"duplicate exact path", dom(at(descriptors.Descriptor{Key: "k", Value: "v"}), at(descriptors.Descriptor{Key: "k", Value: "v"})),
			"d.yaml:9: duplicate descriptor 'd.k_v'", descriptors.ErrDuplicatePath},
		{"duplicate key-only path", dom(descriptors.Descriptor{Key: "k"}, at(descriptors.Descriptor{Key: "k"})),
			"d.yaml:9: duplicate descriptor 'd.k'", descriptors.ErrDuplicatePath},
		{"duplicate wildcard path", dom(descriptors.Descriptor{Key: "k", Value: "a*"}, at(descriptors.Descriptor{Key: "k", Value: "a*"})),
			"d.yaml:9: duplicate descriptor 'd.k_a*'", descriptors.ErrDuplicatePath},
		{"duplicate nested path", dom(descriptors.Descriptor{Key: "k", Descriptors: ds{{Key: "s"}, at(descriptors.Descriptor{Key: "s"})}}),
			"d.yaml:9: duplicate descriptor 'd.k.s'", descriptors.ErrDuplicatePath},
		{"duplicate domain", []descriptors.DomainConfig{{Name: "d", Source: "a.yaml:1"}, {Name: "d", Source: "b.yaml:2"}},
			"b.yaml:2: duplicate domain 'd' (first at a.yaml:1)", descriptors.ErrDuplicateDomain},
		{"empty domain", []descriptors.DomainConfig{{Source: "a.yaml:1"}}, "a.yaml:1: config file cannot have empty domain", nil},
		{"empty key", dom(at(descriptors.Descriptor{Value: "v"})), "d.yaml:9: descriptor has empty key", nil},
		{"replaces itself", dom(at(descriptors.Descriptor{Key: "k", Limit: withLimit(func(l *descriptors.Limit) {
			l.Name, l.Replaces = "n", []string{"other", "n"}
		})})), "d.yaml:9: replaces should not contain name of same descriptor", nil},
		{"empty replaces", dom(at(descriptors.Descriptor{Key: "k", Limit: withLimit(func(l *descriptors.Limit) {
			l.Replaces = []string{""}
		})})), "d.yaml:9: should not have an empty replaces entry", nil},
		{"share_threshold without wildcard", dom(at(descriptors.Descriptor{Key: "k", Value: "v", ShareThreshold: true})),
			"d.yaml:9: share_threshold needs a wildcard value, but 'k' has value 'v'", nil},
		{"share_threshold on key only", dom(at(descriptors.Descriptor{Key: "k", ShareThreshold: true})),
			"d.yaml:9: share_threshold needs a wildcard value", nil},
		{"unlimited with unit", dom(at(descriptors.Descriptor{Key: "k", Limit: withLimit(func(l *descriptors.Limit) { l.Unlimited = true })})),
			"d.yaml:9: should not specify rate limit unit when unlimited", nil},
		{"missing unit", dom(at(descriptors.Descriptor{Key: "k", Limit: &descriptors.Limit{RequestsPerUnit: 1}})),
			"d.yaml:9: missing rate limit unit", nil},
		{"invalid unit", dom(at(descriptors.Descriptor{Key: "k", Limit: withLimit(func(l *descriptors.Limit) { l.Unit = 99 })})),
			"d.yaml:9: invalid rate limit unit", nil},
		{"nested invalid limit", dom(descriptors.Descriptor{Key: "k", Descriptors: ds{at(descriptors.Descriptor{Key: "s", Limit: withLimit(func(l *descriptors.Limit) {
			l.UnitMultiplier = 1001
		})})}}), "d.yaml:9: unit_multiplier 1001 is larger than 1000", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := descriptors.NewSet(c.domains)
			if err == nil || s != nil {
				t.Fatalf("NewSet = %v, %v; want error %q", s, err, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want %q", err, c.want)
			}
			var de *descriptors.Error
			if !errors.As(err, &de) || de.Source == "" {
				t.Errorf("error %q is not a located *Error", err)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("errors.Is(%q, %v) = false", err, c.is)
			}
		})
	}
}

func TestNewSetReportsEveryError(t *testing.T) {
	_, err := descriptors.NewSet([]descriptors.DomainConfig{
		{Name: "a", Source: "a:1", Descriptors: ds{{Key: "", Source: "a:2"}, {Key: "k", Source: "a:3"}, {Key: "k", Source: "a:4"}}},
		{Name: "a", Source: "b:1", Descriptors: ds{{Key: "k", Value: "v", ShareThreshold: true, Source: "b:2"}}},
		{Name: "", Source: "c:1", Descriptors: ds{{Key: "k", Source: "c:2", Limit: &descriptors.Limit{}}}},
	})
	want := []string{
		"a:2: descriptor has empty key",
		"a:4: duplicate descriptor 'a.k' (first at a:3)",
		"b:1: duplicate domain 'a' (first at a:1)",
		"b:2: share_threshold needs a wildcard value, but 'k' has value 'v'",
		"c:1: config file cannot have empty domain",
		"c:2: missing rate limit unit",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("NewSet error:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
