package rules_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

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
