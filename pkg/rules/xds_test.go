package rules_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// xdsPolicy is a shorthand for a RateLimitPolicy.
func xdsPolicy(unit rlsconf.RateLimitUnit, rpu uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}
}

// TestFromXDSMatchesYAML compiles the same rules once as a rules file and
// once as RateLimitConfig protos, using every field the proto has, and
// wants the same limits.
func TestFromXDSMatchesYAML(t *testing.T) {
	yamlRules := `domain: shop
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /api/*
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    value: alice
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3, name: alice}
  - key: tokens
    quota_mode: true
    metadata: {owner: ai-team, tags: [llm, "on"], limits: {soft: true, ratio: 0.5}}
    rate_limit: {unit: week, requests_per_unit: 1000000}
  - key: storage
    rate_limit: {unit: month, requests_per_unit: 30}
  - key: archive
    rate_limit: {unit: year, requests_per_unit: 12}
  - key: plan
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 5000, replaces: [{name: alice}]}
      - key: free
        rate_limit: {unlimited: true}
`
	fromYAML, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(yamlRules)})
	if err != nil {
		t.Fatal(err)
	}
	res := []*rlsconf.RateLimitConfig{{
		Name:   "shop-rules",
		Domain: "shop",
		Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "remote_address", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 10)},
			{Key: "path", Value: "/api/*", DetailedMetric: true, RateLimit: xdsPolicy(rlsconf.RateLimitUnit_MINUTE, 100)},
			{Key: "user", Value: "alice", ShadowMode: true,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 3, Name: "alice"}},
			{Key: "tokens", QuotaMode: true, Metadata: mustStruct(t, map[string]any{
				"owner": "ai-team", "tags": []any{"llm", "on"}, "limits": map[string]any{"soft": true, "ratio": 0.5}}),
				RateLimit: xdsPolicy(rlsconf.RateLimitUnit_WEEK, 1000000)},
			{Key: "storage", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_MONTH, 30)},
			{Key: "archive", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_YEAR, 12)},
			{Key: "plan", Value: "gold", Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 5000,
					Replaces: []*rlsconf.RateLimitReplace{{Name: "alice"}}}},
				{Key: "free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
			}},
		},
	}}
	fromXDS, err := rules.FromXDS(res)
	if err != nil {
		t.Fatal(err)
	}
	var a, b strings.Builder
	if err := fromYAML.Set.Dump(&a); err != nil {
		t.Fatal(err)
	}
	if err := fromXDS.Set.Dump(&b); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("limits differ:\nYAML:\n%s\nxDS:\n%s", a.String(), b.String())
	}
	// Dump leaves out the flags that only affect metrics; compare all
	// but where each rule comes from, a file's line or a resource's path.
	for i, want := range fromYAML.Set.Limits() {
		got := *fromXDS.Set.Limits()[i]
		if !strings.HasPrefix(want.Source, "shop.yaml:") || !strings.HasPrefix(got.Source, "resource 'shop-rules' descriptor "+want.Path) {
			t.Errorf("limit %d: sources %q (YAML) and %q (xDS)", i, want.Source, got.Source)
		}
		got.Source = want.Source
		if !reflect.DeepEqual(&got, want) {
			t.Errorf("limit %d:\n got %+v\nwant %+v", i, &got, want)
		}
	}
	if !fromXDS.FromXDS || !reflect.DeepEqual(fromXDS.Resources, []string{"shop-rules"}) || len(fromXDS.Files) != 0 {
		t.Errorf("FromXDS %v, Resources %q, Files %q", fromXDS.FromXDS, fromXDS.Resources, fromXDS.Files)
	}
	if fromXDS.Set.Domain("shop") == nil {
		t.Error("domain shop missing")
	}
}

// mustStruct builds a google.protobuf.Struct for a descriptor's metadata.
func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFromXDSFields checks each proto field's effect on the compiled
// limit, and that FastLimit's extensions keep their defaults.
func TestFromXDSFields(t *testing.T) {
	cases := []struct {
		name  string
		desc  *rlsconf.RateLimitDescriptor
		entry []descriptors.Entry
		check func(t *testing.T, l *descriptors.Limit)
	}{
		{"unit and rate", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_MINUTE, 7)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Unit != descriptors.Minute || l.RequestsPerUnit != 7 || l.Path != "d.k" {
					t.Errorf("got %s", l)
				}
			}},
		{"every unit", &rlsconf.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "s", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			{Key: "m", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_MINUTE, 1)},
			{Key: "h", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_HOUR, 1)},
			{Key: "day", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_DAY, 1)},
		}}, []descriptors.Entry{{Key: "k", Value: "x"}, {Key: "day", Value: "y"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Unit != descriptors.Day || l.Path != "d.k.day" {
					t.Errorf("got %s", l)
				}
			}},
		{"value", &rlsconf.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			[]descriptors.Entry{{Key: "k", Value: "v"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Path != "d.k_v" {
					t.Errorf("path %s", l.Path)
				}
			}},
		{"wildcard value", &rlsconf.RateLimitDescriptor{Key: "k", Value: "v*", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			[]descriptors.Entry{{Key: "k", Value: "v42"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Path != "d.k_v*" {
					t.Errorf("path %s", l.Path)
				}
			}},
		{"zero rate", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 0)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.RequestsPerUnit != 0 || l.Unlimited {
					t.Errorf("got %s", l)
				}
			}},
		{"unlimited", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if !l.Unlimited {
					t.Errorf("got %s", l)
				}
			}},
		{"name and replaces", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{
			Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Name: "n",
			Replaces: []*rlsconf.RateLimitReplace{{Name: "a"}, {Name: "b"}}}},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Name != "n" || !reflect.DeepEqual(l.Replaces, []string{"a", "b"}) {
					t.Errorf("got %s", l)
				}
			}},
		{"shadow mode", &rlsconf.RateLimitDescriptor{Key: "k", ShadowMode: true, RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if !l.ShadowMode || l.DetailedMetric {
					t.Errorf("got %+v", l)
				}
			}},
		{"quota mode", &rlsconf.RateLimitDescriptor{Key: "k", QuotaMode: true, RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if !l.QuotaMode || l.ShadowMode || l.Metadata != nil {
					t.Errorf("got %+v", l)
				}
			}},
		{"metadata", &rlsconf.RateLimitDescriptor{Key: "k", Metadata: mustStruct(t, map[string]any{
			"team": "payments", "weight": 3, "nested": map[string]any{"list": []any{1, "two", nil}}}),
			RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				// Numbers come out as float64, as structpb's AsMap gives them
				// to the reference.
				want := map[string]any{"team": "payments", "weight": 3.0,
					"nested": map[string]any{"list": []any{1.0, "two", nil}}}
				if !reflect.DeepEqual(l.Metadata, want) || l.QuotaMode {
					t.Errorf("metadata %#v", l.Metadata)
				}
			}},
		{"empty metadata", &rlsconf.RateLimitDescriptor{Key: "k", Metadata: &structpb.Struct{},
			RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Metadata == nil || len(l.Metadata) != 0 {
					t.Errorf("metadata %#v, want empty and not nil", l.Metadata)
				}
			}},
		{"detailed metric", &rlsconf.RateLimitDescriptor{Key: "k", DetailedMetric: true, RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if !l.DetailedMetric || l.ShadowMode {
					t.Errorf("got %+v", l)
				}
			}},
		{"nested without limit above", &rlsconf.RateLimitDescriptor{Key: "a", Value: "1", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "b", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_HOUR, 9)}}},
			[]descriptors.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "z"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Path != "d.a_1.b" || l.RequestsPerUnit != 9 {
					t.Errorf("got %s", l)
				}
			}},
		{"extensions keep defaults", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 4)},
			[]descriptors.Entry{{Key: "k", Value: "x"}},
			func(t *testing.T, l *descriptors.Limit) {
				if l.Algorithm != descriptors.FixedWindow || l.UnitMultiplier != 1 || l.Cost != descriptors.Milli ||
					l.Burst != 4*descriptors.Milli || l.QuotaMode || l.ValueToMetric || l.Metadata != nil {
					t.Errorf("got %+v", l)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := rules.FromXDS([]*rlsconf.RateLimitConfig{{Name: "r", Domain: "d",
				Descriptors: []*rlsconf.RateLimitDescriptor{tc.desc}}})
			if err != nil {
				t.Fatal(err)
			}
			d := r.Set.Domain("d")
			if d.TenantKey != "" || d.AllOrNothing {
				t.Errorf("domain extensions: tenant_key %q atomic %v", d.TenantKey, d.AllOrNothing)
			}
			l := descriptors.Match(d, tc.entry)
			if l == nil {
				t.Fatalf("no limit matches %v", tc.entry)
			}
			tc.check(t, l)
		})
	}
}

func TestFromXDSErrors(t *testing.T) {
	lim := xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)
	one := func(name, domain string, ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
		return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
	}
	cases := []struct {
		name string
		res  []*rlsconf.RateLimitConfig
		want []string // every error, in order
	}{
		{"empty domain", []*rlsconf.RateLimitConfig{one("r", "", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: lim})},
			[]string{"resource 'r' (domain ''): config file cannot have empty domain"}},
		{"duplicate domain", []*rlsconf.RateLimitConfig{
			one("b", "d", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: lim}),
			one("a", "d", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: lim})},
			[]string{"resource 'b' (domain 'd'): duplicate domain 'd' (first at resource 'a' (domain 'd'))"}},
		{"empty key", []*rlsconf.RateLimitConfig{one("r", "d", &rlsconf.RateLimitDescriptor{RateLimit: lim})},
			[]string{"resource 'r' descriptor d. (descriptors[0]): descriptor has empty key"}},
		{"missing unit", []*rlsconf.RateLimitConfig{one("r", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 3}})},
			[]string{"resource 'r' descriptor d.k_v (descriptors[0]): missing rate limit unit"}},
		{"unknown unit number", []*rlsconf.RateLimitConfig{one("r", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: 9, RequestsPerUnit: 3}})},
			[]string{"resource 'r' descriptor d.k (descriptors[0]): invalid rate limit unit '9'"}},
		{"unlimited with unit", []*rlsconf.RateLimitConfig{one("r", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, Unlimited: true}})},
			[]string{"resource 'r' descriptor d.k (descriptors[0]): should not specify rate limit unit when unlimited"}},
		{"duplicate descriptor nested", []*rlsconf.RateLimitConfig{one("r", "d",
			&rlsconf.RateLimitDescriptor{Key: "a", Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "b", Value: "1", RateLimit: lim}, {Key: "b", Value: "1", RateLimit: lim}}})},
			[]string{"resource 'r' descriptor d.a.b_1 (descriptors[0].descriptors[1]): duplicate descriptor 'd.a.b_1' " +
				"(first at resource 'r' descriptor d.a.b_1 (descriptors[0].descriptors[0]))"}},
		{"empty replaces", []*rlsconf.RateLimitConfig{one("r", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1,
				Replaces: []*rlsconf.RateLimitReplace{{}}}})},
			[]string{"resource 'r' descriptor d.k (descriptors[0]): should not have an empty replaces entry"}},
		{"replaces itself", []*rlsconf.RateLimitConfig{one("r", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1,
				Name: "n", Replaces: []*rlsconf.RateLimitReplace{{Name: "n"}}}})},
			[]string{"resource 'r' descriptor d.k (descriptors[0]): replaces should not contain name of same descriptor"}},
		{"unnamed resource", []*rlsconf.RateLimitConfig{one("", "d", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{}})},
			[]string{"resource #0 descriptor d.k (descriptors[0]): missing rate limit unit"}},
		{"value with a port", []*rlsconf.RateLimitConfig{one("r", "d",
			&rlsconf.RateLimitDescriptor{Key: "addr", Value: "10.0.0.1:80", RateLimit: &rlsconf.RateLimitPolicy{}})},
			[]string{"resource 'r' descriptor d.addr_10.0.0.1:80 (descriptors[0]): missing rate limit unit"}},
		{"every error of every resource", []*rlsconf.RateLimitConfig{
			one("r1", "d1", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{}}),
			one("r2", "d2", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: 42}},
				&rlsconf.RateLimitDescriptor{Key: "", RateLimit: lim})},
			[]string{
				"resource 'r1' descriptor d1.k (descriptors[0]): missing rate limit unit",
				"resource 'r2' descriptor d2. (descriptors[1]): descriptor has empty key",
				"resource 'r2' descriptor d2.k (descriptors[0]): invalid rate limit unit '42'",
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := rules.FromXDS(tc.res)
			if err == nil {
				t.Fatalf("no error; rules %v", r.Set.Domains())
			}
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *rules.Error
				if !errors.As(e, &ce) || ce.Line != 0 {
					t.Errorf("%v: not a *rules.Error without a line", e)
				}
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestFromXDSEmpty(t *testing.T) {
	r, err := rules.FromXDS(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Set.Domains()) != 0 || len(r.Resources) != 0 || r.Hash == "" {
		t.Errorf("domains %v, resources %v, hash %q", r.Set.Domains(), r.Resources, r.Hash)
	}
}

func TestFromXDSHash(t *testing.T) {
	a := &rlsconf.RateLimitConfig{Name: "a", Domain: "da", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)}}}
	b := &rlsconf.RateLimitConfig{Name: "b", Domain: "db", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 1)}}}
	b2 := &rlsconf.RateLimitConfig{Name: "b", Domain: "db", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", RateLimit: xdsPolicy(rlsconf.RateLimitUnit_SECOND, 2)}}}
	hash := func(res ...*rlsconf.RateLimitConfig) string {
		t.Helper()
		r, err := rules.FromXDS(res)
		if err != nil {
			t.Fatal(err)
		}
		return r.Hash
	}
	if hash(a, b) != hash(b, a) {
		t.Error("hash depends on the order of resources")
	}
	if hash(a, b) == hash(a, b2) {
		t.Error("hash ignores a changed rate")
	}
	if hash(a) == hash(a, b) {
		t.Error("hash ignores an added resource")
	}
	r, err := rules.FromXDS([]*rlsconf.RateLimitConfig{b, a})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Resources, []string{"a", "b"}) {
		t.Errorf("resources %q, want sorted", r.Resources)
	}
}
