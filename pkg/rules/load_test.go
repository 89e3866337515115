package rules_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// errorCases maps each fixture in testdata/errors to the error it must
// produce, position included.
var errorCases = map[string]string{
	"alias_cycle.yaml":                      "alias_cycle.yaml: invalid YAML: anchor 'loop' value contains itself",
	"bad_algorithm.yaml":                    "bad_algorithm.yaml:5: unknown algorithm 'leaky_bucket'",
	"bad_unit.yaml":                         "bad_unit.yaml:5: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)",
	"token_bucket_zero_rate.yaml":           "token_bucket_zero_rate.yaml:6: token_bucket needs requests_per_unit above 0",
	"bool_string.yaml":                      "bool_string.yaml:4: shadow_mode: expected a boolean, got a string",
	"burst_decimals.yaml":                   "burst_decimals.yaml:8: burst '2.0005' has more than 3 decimals",
	"burst_too_large.yaml":                  "burst_too_large.yaml:8: burst 1125899906842.625 is larger than 1125899906842.624",
	"burst_negative.yaml":                   "burst_negative.yaml:8: burst must not be negative",
	"burst_string.yaml":                     "burst_string.yaml:8: burst: expected a number, got a string",
	"burst_without_token_bucket.yaml":       "burst_without_token_bucket.yaml:8: burst needs algorithm: token_bucket",
	"burst_zero.yaml":                       "burst_zero.yaml:8: burst must be positive",
	"calendar_hour.yaml":                    "calendar_hour.yaml:7: calendar needs unit day, week, month or year, not hour",
	"calendar_list.yaml":                    "calendar_list.yaml:7: calendar: expected a string, got a list",
	"calendar_local.yaml":                   "calendar_local.yaml:7: unknown time zone 'Local': name an IANA zone such as UTC or Europe/Berlin",
	"calendar_token_bucket.yaml":            "calendar_token_bucket.yaml:8: calendar needs fixed_window or sliding_window: a token bucket has no windows",
	"calendar_unknown_zone.yaml":            "calendar_unknown_zone.yaml:9: unknown time zone 'Europe/Bonn'",
	"calendar_unlimited.yaml":               "calendar_unlimited.yaml:6: calendar needs a limit: this one is unlimited",
	"charge_unknown.yaml":                   "charge_unknown.yaml:7: unknown charge 'sometimes' (want when_allowed or always)",
	"charge_unlimited.yaml":                 "charge_unlimited.yaml:6: charge needs a limit: this one is unlimited",
	"cost_decimals.yaml":                    "cost_decimals.yaml:7: cost '0.0001' has more than 3 decimals",
	"cost_exponent.yaml":                    "cost_exponent.yaml:7: cost '1e-3' is not a decimal number",
	"cost_negative.yaml":                    "cost_negative.yaml:7: cost must not be negative",
	"cost_string.yaml":                      "cost_string.yaml:7: cost: expected a number, got a string",
	"cost_zero.yaml":                        "cost_zero.yaml:7: cost must be positive",
	"descriptor_scalar.yaml":                "descriptor_scalar.yaml:3: descriptor: expected a mapping, got a string",
	"descriptors_map.yaml":                  "descriptors_map.yaml:3: descriptors: expected a list, got a mapping",
	"domain_list.yaml":                      "domain_list.yaml:1: domain: expected a string, got a list",
	"duplicate_key.yaml":                    `duplicate_key.yaml:7: invalid YAML: mapping key "unit" already defined at line 5`,
	"duplicate_path.yaml":                   "duplicate_path.yaml:6: duplicate descriptor 'dup.database_users' (first at duplicate_path.yaml:3)",
	"duplicate_path_nested.yaml":            "duplicate_path_nested.yaml:8: duplicate descriptor 'dup.message_type_marketing.to_number' (first at duplicate_path_nested.yaml:6)",
	"duplicate_wildcard.yaml":               "duplicate_wildcard.yaml:6: duplicate descriptor 'dup.path_/api/*'",
	"empty_domain.yaml":                     "empty_domain.yaml:1: config file cannot have empty domain",
	"empty_file.yaml":                       "empty_file.yaml:1: config file cannot have empty domain",
	"empty_key.yaml":                        "empty_key.yaml:3: descriptor has empty key",
	"key_list.yaml":                         "key_list.yaml:3: key: expected a string, got a list",
	"many_errors.yaml":                      "many_errors.yaml:4: invalid rate limit unit 'fortnight'",
	"metadata_list.yaml":                    "metadata_list.yaml:4: metadata: expected a mapping, got a list",
	"missing_domain.yaml":                   "missing_domain.yaml:1: config file cannot have empty domain",
	"missing_key.yaml":                      "missing_key.yaml:3: descriptor has empty key",
	"missing_requests_per_unit.yaml":        "missing_requests_per_unit.yaml:5: rate_limit has no requests_per_unit, so every request would be over the limit: set requests_per_unit (0 to refuse every request), or unlimited: true",
	"missing_unit.yaml":                     "missing_unit.yaml:4: missing rate limit unit",
	"multiple_documents.yaml":               "multiple_documents.yaml:2: a rules file holds one YAML document",
	"non_string_key.yaml":                   "non_string_key.yaml:1: key 1.5 is a number, not a string; the keys here are atomic, descriptors, domain, tenant_key",
	"not_a_mapping.yaml":                    "not_a_mapping.yaml:1: rules file: expected a mapping, got a list",
	"rate_limit_list.yaml":                  "rate_limit_list.yaml:5: rate_limit: expected a mapping, got a list",
	"rate_limits_bad_limit.yaml":            "rate_limits_bad_limit.yaml:6: requests_per_unit must not be negative",
	"rate_limits_both.yaml":                 "rate_limits_both.yaml:6: rate_limit and rate_limits on one descriptor; list every limit in rate_limits",
	"rate_limits_empty.yaml":                "rate_limits_empty.yaml:4: rate_limits: expected at least one limit",
	"rate_limits_missing_unit.yaml":         "rate_limits_missing_unit.yaml:6: rate_limits[1]: missing rate limit unit",
	"rate_limits_replaces_own.yaml":         "rate_limits_replaces_own.yaml:6: rate_limits[1] replaces 'burst', a limit of the same descriptor",
	"rate_limits_same_name.yaml":            "rate_limits_same_name.yaml:6: rate_limits[0] and rate_limits[1] both count as 'plan'; give them distinct names",
	"rate_limits_too_many.yaml":             "rate_limits_too_many.yaml:4: rate_limits has 17 limits, more than 16",
	"rate_limits_unlimited.yaml":            "rate_limits_unlimited.yaml:6: rate_limits[1]: unlimited cannot be one of several limits",
	"replaces_empty.yaml":                   "replaces_empty.yaml:8: should not have an empty replaces entry",
	"replaces_self.yaml":                    "replaces_self.yaml:8: replaces should not contain name of same descriptor",
	"rpu_negative.yaml":                     "rpu_negative.yaml:6: requests_per_unit must not be negative",
	"rpu_string.yaml":                       "rpu_string.yaml:6: requests_per_unit: expected an integer, got a string",
	"rpu_too_large.yaml":                    "rpu_too_large.yaml:6: requests_per_unit 4294967296 is larger than 4294967295",
	"share_threshold_without_wildcard.yaml": "share_threshold_without_wildcard.yaml:5: share_threshold needs a wildcard value, but 'path' has value '/api/users'",
	"syntax_error.yaml":                     "syntax_error.yaml:4: invalid YAML: did not find expected ',' or '}'",
	"tab_indent.yaml":                       "tab_indent.yaml:3: invalid YAML: found character that cannot start any token",
	"token_bucket_debit_inexact.yaml":       "token_bucket_debit_inexact.yaml:9: token bucket 7 per 1 year with burst 285000 cannot be computed exactly",
	"token_bucket_inexact.yaml":             "token_bucket_inexact.yaml:8: token bucket 7 per 1 year with burst 1000000000 cannot be computed exactly",
	"unit_multiplier_float.yaml":            "unit_multiplier_float.yaml:7: unit_multiplier: expected an integer, got a number",
	"unit_multiplier_negative.yaml":         "unit_multiplier_negative.yaml:7: unit_multiplier must not be negative",
	"unit_multiplier_too_large.yaml":        "unit_multiplier_too_large.yaml:7: unit_multiplier 1001 is larger than 1000",
	"unit_multiplier_zero.yaml":             "unit_multiplier_zero.yaml:7: unit_multiplier must be positive",
	"unknown_key.yaml":                      "unknown_key.yaml:4: unknown key 'rate_limt'",
	"unknown_key_rate_limit.yaml":           "unknown_key_rate_limit.yaml:6: unknown key 'requests_per_second'",
	"unknown_key_replaces.yaml":             "unknown_key_replaces.yaml:8: unknown key 'nam'",
	"unknown_key_top.yaml":                  "unknown_key_top.yaml:2: unknown key 'descriptor'",
	"unlimited_with_unit.yaml":              "unlimited_with_unit.yaml:6: should not specify rate limit unit when unlimited",
}

func TestErrors(t *testing.T) {
	paths, err := filepath.Glob("testdata/errors/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := errorCases[name]
			if !ok {
				t.Fatalf("fixture %s has no case", name)
			}
			r, err := rules.Parse(map[string][]byte{name: files.Read(t, path)})
			if err == nil || r != nil {
				t.Fatalf("Parse = %v, %v; want error %q", r, err, want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, want)
			}
		})
	}
	if len(paths) != len(errorCases) {
		t.Errorf("%d fixtures for %d cases", len(paths), len(errorCases))
	}
}

// TestErrorsOnePerProblem checks that a problem is reported once, not again
// by a later stage: a top-level key that is not a string (the reference's
// test/config/non_string_key.yaml, a number where "domain" belongs) or a
// domain that is not one leaves the file without a domain, which is not
// reported again as "config file cannot have empty domain".
func TestErrorsOnePerProblem(t *testing.T) {
	for name := range errorCases {
		if name == "many_errors.yaml" {
			continue
		}
		_, err := rules.Parse(map[string][]byte{name: files.Read(t, "testdata/errors/"+name)})
		if errs := unjoin(err); len(errs) != 1 {
			t.Errorf("%s: %d errors, want 1:\n%v", name, len(errs), err)
		}
	}
	// A file that lacks its domain besides is still told so.
	_, err := rules.Parse(map[string][]byte{"a.yaml": []byte("descriptors: []\n"), "b.yaml": []byte("1.5: x\n")})
	want := []string{
		"a.yaml:1: config file cannot have empty domain",
		"b.yaml:1: key 1.5 is a number, not a string; the keys here are atomic, descriptors, domain, tenant_key",
	}
	var got []string
	for _, e := range unjoin(err) {
		got = append(got, e.Error())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := rules.Parse(map[string][]byte{
		"many.yaml":  files.Read(t, "testdata/errors/many_errors.yaml"),
		"alias.yaml": files.Read(t, "testdata/errors/alias_cycle.yaml"),
	})
	want := []string{
		"alias.yaml: invalid YAML: anchor 'loop' value contains itself",
		"many.yaml:4: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)",
		"many.yaml:6: unknown key 'rate_limt'; did you mean 'rate_limit'?",
		"many.yaml:9: duplicate descriptor 'many.c' (first at many.yaml:7)",
		"many.yaml:10: should not specify rate limit unit when unlimited",
		"many.yaml:12: descriptor has empty key",
	}
	var got []string
	for _, e := range unjoin(err) {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !errors.Is(err, descriptors.ErrDuplicatePath) {
		t.Error("errors.Is(err, ErrDuplicatePath) = false")
	}
	var ce *rules.Error
	if !errors.As(err, &ce) || ce.File != "alias.yaml" || ce.Line != 0 {
		t.Errorf("errors.As = %+v", ce)
	}
}

func TestDuplicateDomain(t *testing.T) {
	_, err := rules.Load("testdata/dupdomain")
	want := "testdata/dupdomain/b.yaml:2: duplicate domain 'shared' (first at testdata/dupdomain/a.yaml:1); " +
		"files of one domain are merged only with --merge-domain-config (MERGE_DOMAIN_CONFIG=true)"
	if err == nil || err.Error() != want {
		t.Errorf("Load = %v, want %s", err, want)
	}
	if !errors.Is(err, descriptors.ErrDuplicateDomain) {
		t.Error("errors.Is(err, ErrDuplicateDomain) = false")
	}
	var ce *rules.Error
	if !errors.As(err, &ce) || ce.File != "testdata/dupdomain/b.yaml" || ce.Line != 2 {
		t.Errorf("errors.As = %+v", ce)
	}
}

// match is a request against one domain of r and the limit it must get
// (nil: no limit).
type match struct {
	domain  string
	entries []descriptors.Entry
	rpu     uint32
	unit    descriptors.Unit
	check   func(*testing.T, *descriptors.Limit)
	none    bool
}

func e(kv ...string) []descriptors.Entry {
	var es []descriptors.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func checkMatches(t *testing.T, r *rules.Loaded, cases []match) {
	t.Helper()
	for _, c := range cases {
		l := descriptors.Match(r.Set.Domain(c.domain), c.entries)
		switch {
		case c.none && l != nil:
			t.Errorf("%s %v: got %s, want no limit", c.domain, c.entries, l.Path)
		case c.none:
		case l == nil:
			t.Errorf("%s %v: no limit", c.domain, c.entries)
		case l.RequestsPerUnit != c.rpu || l.Unit != c.unit:
			t.Errorf("%s %v: %d per %s, want %d per %s", c.domain, c.entries, l.RequestsPerUnit, l.Unit, c.rpu, c.unit)
		case c.check != nil:
			c.check(t, l)
		}
	}
}

func TestReferenceFilesLoad(t *testing.T) {
	r, err := rules.Load("testdata/valid")
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{"edge_proxy_per_ip.yaml", "example6.yaml", "example7.yaml", "example8.yaml", "extensions.yaml", "internal.yml"}
	for i := range wantFiles {
		wantFiles[i] = filepath.Join("testdata/valid", wantFiles[i])
	}
	if !slices.Equal(r.Files, wantFiles) {
		t.Errorf("Files = %v, want %v", r.Files, wantFiles)
	}
	checkMatches(t, r, []match{
		{domain: "edge_proxy_per_ip", entries: e("remote_address", "50.0.0.1"), rpu: 10, unit: descriptors.Second},
		{domain: "edge_proxy_per_ip", entries: e("remote_address", "50.0.0.5"), rpu: 0, unit: descriptors.Second},
		{domain: "internal", entries: e("ldap", "x"), check: func(t *testing.T, l *descriptors.Limit) {
			if !l.Unlimited {
				t.Error("ldap: not unlimited")
			}
		}},
		{domain: "internal", entries: e("azure", "x"), rpu: 100, unit: descriptors.Minute},
		{domain: "example6", entries: e("service", "auth", "user", "user-a"), rpu: 10, unit: descriptors.Second,
			check: func(t *testing.T, l *descriptors.Limit) {
				if !l.ShadowMode {
					t.Error("user-a: not in shadow mode")
				}
			}},
		{domain: "example6", entries: e("service", "auth", "user", "user-c"), none: true},
		{domain: "example7", entries: e("key_1", "value_1", "user", "bkthomps"), rpu: 5, unit: descriptors.Second,
			check: func(t *testing.T, l *descriptors.Limit) {
				if l.Name != "specific_limit" {
					t.Errorf("name = %q", l.Name)
				}
			}},
		{domain: "example7", entries: e("key_2", "value_2", "user", "bkthomps"), rpu: 10, unit: descriptors.Second,
			check: func(t *testing.T, l *descriptors.Limit) {
				if !slices.Equal(l.Replaces, []string{"specific_limit"}) {
					t.Errorf("replaces = %q", l.Replaces)
				}
			}},
		{domain: "example8", entries: e("key1", "other"), rpu: 10, unit: descriptors.Minute,
			check: func(t *testing.T, l *descriptors.Limit) {
				if !l.DetailedMetric {
					t.Error("key1: no detailed metric")
				}
			}},
		{domain: "example8", entries: e("key1", "value1"), rpu: 20, unit: descriptors.Minute},
		{domain: "example8", entries: e("key2", "value_2"), rpu: 20, unit: descriptors.Minute},
		{domain: "example8", entries: e("key2", "other"), none: true},
	})
}

func TestExtensions(t *testing.T) {
	r, err := rules.Load("testdata/valid")
	if err != nil {
		t.Fatal(err)
	}
	d := r.Set.Domain("extensions")
	if d.TenantKey != "plan" || !d.Atomic {
		t.Errorf("domain = %+v", d)
	}
	bucket := func(burst, cost int64) func(*testing.T, *descriptors.Limit) {
		return func(t *testing.T, l *descriptors.Limit) {
			if l.Algorithm != descriptors.TokenBucket || l.Burst != burst || l.Cost != cost || l.UnitMultiplier != 1 {
				t.Errorf("%s: %s burst %d cost %d multiplier %d, want token_bucket burst %d cost %d",
					l.Path, l.Algorithm, l.Burst, l.Cost, l.UnitMultiplier, burst, cost)
			}
		}
	}
	meta := map[string]any{
		"owner":  "team-a",
		"limits": map[string]any{"soft": 0.5, "hard": 1},
		"tags":   []any{"a", 7, true, nil},
		"when":   "2024-01-02",
		"1":      "one",
	}
	checkMatches(t, r, []match{
		{domain: "extensions", entries: e("plan", "pro", "user", "u1"), rpu: 10, unit: descriptors.Second,
			check: func(t *testing.T, l *descriptors.Limit) {
				bucket(12500, 1)(t, l)
				if !l.ValueToMetric {
					t.Error("no value_to_metric")
				}
			}},
		{domain: "extensions", entries: e("window", "w"), rpu: 4294967295, unit: descriptors.Week,
			check: func(t *testing.T, l *descriptors.Limit) {
				if l.Algorithm != descriptors.SlidingWindow || l.UnitMultiplier != 2 || l.Cost != descriptors.Milli {
					t.Errorf("window: %s multiplier %d cost %d", l.Algorithm, l.UnitMultiplier, l.Cost)
				}
			}},
		{domain: "extensions", entries: e("fixed", "f"), rpu: 1000, unit: descriptors.Year,
			check: func(t *testing.T, l *descriptors.Limit) {
				if l.Algorithm != descriptors.FixedWindow || !l.QuotaMode || l.Cost != 2000 || l.Burst != 1000*descriptors.Milli {
					t.Errorf("fixed: %s quota %v cost %d burst %d", l.Algorithm, l.QuotaMode, l.Cost, l.Burst)
				}
			}},
		{domain: "extensions", entries: e("path", "x/v1/users"), rpu: 10, unit: descriptors.Second,
			check: func(t *testing.T, l *descriptors.Limit) {
				bucket(12500, 1)(t, l)
				if p, ok := l.SharedValue(0); !ok || p != "*/v1/*" {
					t.Errorf("SharedValue(0) = %q, %v", p, ok)
				}
				if !reflect.DeepEqual(l.Metadata, meta) {
					t.Errorf("metadata = %#v\nwant %#v", l.Metadata, meta)
				}
			}},
		{domain: "extensions", entries: e("merged", "own"), rpu: 10, unit: descriptors.Second,
			check: func(t *testing.T, l *descriptors.Limit) {
				bucket(3000, 500)(t, l)
				if l.Metadata["owner"] != "team-b" || l.Metadata["when"] != "2024-01-02" {
					t.Errorf("merged metadata = %v", l.Metadata)
				}
			}},
		{domain: "extensions", entries: e("merged", "base"), none: true},
		{domain: "extensions", entries: e("budget", "b"), rpu: 100000, unit: descriptors.Day,
			check: func(t *testing.T, l *descriptors.Limit) {
				month := l.Group[1]
				if l.Charge != descriptors.ChargeAlways || l.Periods() != nil ||
					month.Charge != descriptors.ChargeWhenAllowed || month.Calendar != "Europe/Berlin" || month.Periods().Zone() != "Europe/Berlin" {
					t.Errorf("budget: charge %s calendar %q; month: charge %s calendar %q", l.Charge, l.Calendar, month.Charge, month.Calendar)
				}
				if s := month.String(); !strings.Contains(s, "calendar=Europe/Berlin") || strings.Contains(s, "charge=") ||
					!strings.Contains(l.String(), "charge=always") {
					t.Errorf("dumped as %q and %q", l.String(), s)
				}
			}},
	})
}

// TestShippedRules checks the rules that the default --config loads.
func TestShippedRules(t *testing.T) {
	r, err := rules.Load("../../config")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Files, []string{"../../config/ratelimit.yaml"}) {
		t.Errorf("Files = %v", r.Files)
	}
	checkMatches(t, r, []match{
		{domain: "fastlimit", entries: e("api_key", "k1"), rpu: 100, unit: descriptors.Minute},
		{domain: "fastlimit", entries: e("plan", "premium", "user", "u"), rpu: 1000, unit: descriptors.Minute},
		{domain: "fastlimit", entries: e("plan", "free", "user", "u"), rpu: 10, unit: descriptors.Second},
		{domain: "fastlimit", entries: e("plan", "free", "search", "q"), rpu: 2, unit: descriptors.Second},
		{domain: "fastlimit", entries: e("plan", "gold", "user", "u"), none: true},
		{domain: "fastlimit", entries: e("path", "/healthz"), check: func(t *testing.T, l *descriptors.Limit) {
			if !l.Unlimited {
				t.Error("/healthz: not unlimited")
			}
		}},
		{domain: "fastlimit", entries: e("path", "/admin/users"), rpu: 5, unit: descriptors.Second},
		{domain: "fastlimit", entries: e("path", "/other"), none: true},
	})
	// The shipped rules are in the reference's format: they use none of
	// FastLimit's extensions (examples/fastlimit-only shows those).
	for _, l := range r.Set.Limits() {
		if l.Algorithm != descriptors.FixedWindow || l.Cost != descriptors.Milli || l.UnitMultiplier != 1 ||
			(!l.Unlimited && l.Burst != l.Capacity()) {
			t.Errorf("%s uses FastLimit's extensions: %s", l.Path, l)
		}
	}
	if d := r.Set.Domain("fastlimit"); d.TenantKey != "" || d.Atomic {
		t.Errorf("tenant key %q, atomic %v", d.TenantKey, d.Atomic)
	}
}

func TestExamplesLoad(t *testing.T) {
	r, err := rules.Load("../../config/examples")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Set.Domains(); !slices.Equal(got, []string{"messaging", "mongo_cps"}) {
		t.Errorf("domains = %v", got)
	}
	checkMatches(t, r, []match{
		{domain: "mongo_cps", entries: e("database", "users"), rpu: 500, unit: descriptors.Second},
		{domain: "messaging", entries: e("message_type", "marketing", "to_number", "2061111111"), rpu: 5, unit: descriptors.Day},
		{domain: "messaging", entries: e("to_number", "2061111111"), rpu: 100, unit: descriptors.Day},
	})
	only, err := rules.Load("../../examples/fastlimit-only")
	if err != nil {
		t.Fatal(err)
	}
	checkMatches(t, only, []match{
		{domain: "saas_api", entries: e("tier", "starter", "org", "o", "endpoint", "/reports"), rpu: 2, unit: descriptors.Second,
			check: func(t *testing.T, l *descriptors.Limit) {
				if l.Algorithm != descriptors.TokenBucket || l.Cost != 2500 {
					t.Errorf("reports: %s", l)
				}
			}},
	})
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, domain string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		files.Write(t, filepath.Join(dir, name), "domain: "+domain+"\n")
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// A Kubernetes ConfigMap mount: files in a timestamped directory,
	// "..data" linking to it, and visible links through "..data".
	write("..2024_01_01/cm.yaml", "configmap")
	link("..2024_01_01", "..data")
	link("..data/cm.yaml", "cm.yaml")
	write("a.yaml", "a")
	write("b.yml", "b")
	write(".hidden.yaml", "hidden")
	write("notes.txt", "txt")
	write("sub/c.yaml", "sub")
	write("dir.yaml/d.yaml", "dir")
	link("sub", "subdir.yaml")

	r, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Set.Domains(); !slices.Equal(got, []string{"a", "b", "configmap"}) {
		t.Errorf("domains = %v", got)
	}
	want := []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml"), filepath.Join(dir, "cm.yaml")}
	if !slices.Equal(r.Files, want) {
		t.Errorf("Files = %v, want %v", r.Files, want)
	}

	link("missing.yaml", "broken.yaml")
	if _, err := rules.Load(dir); err == nil {
		t.Error("Load with a broken symlink: no error")
	}
}

func TestLoadNothing(t *testing.T) {
	if _, err := rules.Load(t.TempDir()); !errors.Is(err, rules.ErrNoFiles) {
		t.Errorf("empty dir: %v, want ErrNoFiles", err)
	}
	if _, err := rules.Load(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v, want ErrNotExist", err)
	}
	if _, err := rules.Parse(nil); !errors.Is(err, rules.ErrNoFiles) {
		t.Errorf("Parse(nil): %v, want ErrNoFiles", err)
	}
}

func TestHash(t *testing.T) {
	a := []byte("domain: a\n")
	hash := func(files map[string][]byte) string {
		t.Helper()
		r, err := rules.Parse(files)
		if err != nil {
			t.Fatal(err)
		}
		return r.Hash
	}
	base := hash(map[string][]byte{"a.yaml": a})
	if len(base) != 64 || hash(map[string][]byte{"a.yaml": a}) != base {
		t.Errorf("hash %q is not a stable SHA-256", base)
	}
	for name, files := range map[string]map[string][]byte{
		"content": {"a.yaml": []byte("domain: a \n")},
		"name":    {"z.yaml": a},
		"files":   {"a.yaml": a, "b.yaml": []byte("domain: b\n")},
	} {
		if hash(files) == base {
			t.Errorf("changed %s, same hash", name)
		}
	}
	// Load hashes names relative to the directory, as Parse sees them.
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "a.yaml"), a)
	r, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Hash != base {
		t.Errorf("Load hash %s, Parse hash %s", r.Hash, base)
	}
	// Fingerprint hashes the same files without parsing them: what is not
	// a rules file does not count, and an unparsable file does.
	if fp, err := rules.Fingerprint(dir); err != nil || fp != base {
		t.Errorf("Fingerprint = %s, %v; want Load's hash %s", fp, err, base)
	}
	for name, body := range map[string]string{".a.yaml.tmp": "x", "notes.txt": "x"} {
		files.Write(t, filepath.Join(dir, name), body)
	}
	if fp, err := rules.Fingerprint(dir); err != nil || fp != base {
		t.Errorf("Fingerprint with other files = %s, %v; want %s", fp, err, base)
	}
	files.Write(t, filepath.Join(dir, "a.yaml"), "domain: [\n")
	if fp, err := rules.Fingerprint(dir); err != nil || fp == base {
		t.Errorf("Fingerprint of a changed, unparsable file = %s, %v", fp, err)
	}
	if _, err := rules.Fingerprint(filepath.Join(dir, "missing")); err == nil {
		t.Error("Fingerprint of a missing directory succeeded")
	}
}

func TestIsRulesName(t *testing.T) {
	for name, want := range map[string]bool{"a.yaml": true, "a.yml": true, ".a.yaml": false, "..data": false,
		"a.yaml.tmp": false, "a.yaml~": false, "a.json": false, ".a.yaml.swp": false} {
		if got := rules.IsRulesName(name); got != want {
			t.Errorf("IsRulesName(%q) = %v", name, got)
		}
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func domainFile(domain string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
}

// TestLoadTree loads directories as envoyproxy/ratelimit's runtime loader
// (goruntime) walks them: any file name, nested directories, symlinked
// files but not symlinked directories, dot files by option, a ConfigMap's
// ".." entries never.
func TestLoadTree(t *testing.T) {
	dir := files.Dir(t, map[string]string{
		"config/a.yaml":               domainFile("a"),
		"config/b.conf":               domainFile("b"),
		"config/nested/deeper/c":      domainFile("c"),
		"config/.hidden.yaml":         domainFile("hidden"),
		"config/.dotdir/e.yaml":       domainFile("dotdir"),
		"config/..2024_01_01/cm.yaml": domainFile("configmap"),
		"config/..data":               "-> ..2024_01_01",
		"config/cm.yaml":              "-> ..data/cm.yaml",
		"config/linked":               "-> ../elsewhere",
		"elsewhere/f.yaml":            domainFile("elsewhere"),
		"config.yaml":                 domainFile("sibling"),
		"config.d/g.yaml":             domainFile("siblingdir"),
		"configx.yaml":                domainFile("other"),
		"other/h.yaml":                domainFile("other2"),
	})
	cases := []struct {
		name string
		dir  string
		opts rules.Options
		want []string
	}{
		{"watch root false, dot files ignored", filepath.Join(dir, "config"), rules.Options{Tree: true},
			[]string{"a", "b", "c", "configmap"}},
		{"watch root false, dot files loaded", filepath.Join(dir, "config"), rules.Options{Tree: true, DotFiles: true},
			[]string{"a", "b", "c", "configmap", "dotdir", "hidden"}},
		{"watch root true: keys with the prefix", dir, rules.Options{Tree: true, Prefix: "config"},
			[]string{"a", "b", "c", "configmap", "sibling", "siblingdir"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := rules.LoadWith(c.dir, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Set.Domains(); !slices.Equal(got, c.want) {
				t.Errorf("domains = %v, want %v", got, c.want)
			}
		})
	}

	// The files are named by their paths, in errors too.
	r, err := rules.LoadWith(filepath.Join(dir, "config"), rules.Options{Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "config", "nested/deeper/c"); !slices.Contains(r.Files, want) {
		t.Errorf("Files = %v, want %s among them", r.Files, want)
	}
	bad := files.Dir(t, map[string]string{"sub/bad.txt": "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
	_, err = rules.LoadWith(bad, rules.Options{Tree: true})
	var ce *rules.Error
	if !errors.As(err, &ce) || ce.File != filepath.Join(bad, "sub/bad.txt") || ce.Line != 4 {
		t.Errorf("error = %v, want one at sub/bad.txt:4", err)
	}
	if _, err := rules.LoadWith(t.TempDir(), rules.Options{Tree: true}); !errors.Is(err, rules.ErrNoFiles) {
		t.Errorf("empty tree: %v, want ErrNoFiles", err)
	}
}

// TestMergeDomains follows MERGE_DOMAIN_CONFIG: files of one domain add
// their top-level descriptors to it; a repeated descriptor is an error.
func TestMergeDomains(t *testing.T) {
	dir := files.Dir(t, map[string]string{
		"a.yaml": "domain: shared\ndescriptors:\n  - key: one\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: shared\ntenant_key: plan\ndescriptors:\n  - key: two\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
	})
	if _, err := rules.Load(dir); !errors.Is(err, descriptors.ErrDuplicateDomain) {
		t.Fatalf("without merging: %v, want ErrDuplicateDomain", err)
	}
	r, err := rules.LoadWith(dir, rules.Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	checkMatches(t, r, []match{
		{domain: "shared", entries: e("one", "x"), rpu: 1, unit: descriptors.Second},
		{domain: "shared", entries: e("two", "x"), rpu: 2, unit: descriptors.Minute},
	})
	if d := r.Set.Domain("shared"); d.TenantKey != "plan" {
		t.Errorf("merged tenant_key = %q, want plan", d.TenantKey)
	}

	dup := files.Dir(t, map[string]string{
		"a.yaml": "domain: shared\ndescriptors:\n  - key: one\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: shared\ndescriptors:\n  - key: one\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
	})
	_, err = rules.LoadWith(dup, rules.Options{MergeDomains: true})
	var ce *rules.Error
	if !errors.Is(err, descriptors.ErrDuplicatePath) || !errors.As(err, &ce) || ce.File != filepath.Join(dup, "b.yaml") || ce.Line != 3 {
		t.Errorf("repeated descriptor: %v, want a duplicate at b.yaml:3", err)
	}

	tenants := files.Dir(t, map[string]string{
		"a.yaml": "domain: shared\ntenant_key: plan\n",
		"b.yaml": "domain: shared\ntenant_key: tier\n",
	})
	if _, err = rules.LoadWith(tenants, rules.Options{MergeDomains: true}); err == nil ||
		!strings.Contains(err.Error(), "b.yaml:1: tenant_key 'tier' of domain 'shared' differs") {
		t.Errorf("differing tenant_key: %v", err)
	}
}
