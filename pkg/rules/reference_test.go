package rules_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/refserver"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// referenceCases are envoyproxy/ratelimit's config tests
// (test/config/config_test.go at the pinned version), read from its module
// in the Go module cache (refserver.Fixtures): the files each test loads
// together, whether it merges domains, and whether the reference accepts
// them. FastLimit's messages differ; the verdicts agree.
var referenceCases = []struct {
	name   string
	files  []string
	merge  bool
	accept bool
}{
	{"BasicConfig", []string{"basic_config.yaml"}, false, true},
	{"DomainMerge", []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, true, true},
	{"ShadowModeConfig", []string{"shadowmode_config.yaml"}, false, true},
	{"WildcardConfig", []string{"wildcard.yaml"}, false, true},
	{"ShareThreshold", []string{"share_threshold.yaml"}, false, true},
	{"EmptyDomain", []string{"empty_domain.yaml"}, false, false},
	{"DuplicateDomain", []string{"basic_config.yaml", "duplicate_domain.yaml"}, false, false},
	{"EmptyKey", []string{"empty_key.yaml"}, false, false},
	{"DuplicateKey", []string{"duplicate_key.yaml"}, false, false},
	{"DuplicateKeyDomainMerge", []string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, true, false},
	{"BadLimitUnit", []string{"bad_limit_unit.yaml"}, false, false},
	{"ReplacesSelf", []string{"replaces_self.yaml"}, false, false},
	{"ReplacesEmpty", []string{"replaces_empty.yaml"}, false, false},
	{"BadYaml", []string{"bad_yaml.yaml"}, false, false},
	{"MisspelledKey", []string{"misspelled_key.yaml"}, false, false},
	{"MisspelledKey2", []string{"misspelled_key2.yaml"}, false, false},
	{"NonStringKey", []string{"non_string_key.yaml"}, false, false},
	{"NonMapList", []string{"non_map_list.yaml"}, false, false},
	{"UnlimitedWithRateLimitUnit", []string{"unlimited_with_unit.yaml"}, false, false},
}

// referenceMessages are FastLimit's whole error for some of the cases.
var referenceMessages = map[string]string{
	// The key is named, and the missing domain that follows not reported again.
	"NonStringKey": "non_string_key.yaml:1: key 0.25 is a number, not a string; the keys here are atomic, descriptors, domain, tenant_key",
}

// TestReferenceFixtures loads the reference's own fixtures as its tests
// do and checks that FastLimit accepts and refuses the same ones, each
// refusal naming a file of the test.
func TestReferenceFixtures(t *testing.T) {
	fixtures := refserver.Fixtures(t)
	for _, c := range referenceCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, f := range c.files {
				// A file loaded twice is two files of one directory.
				files.Write(t, filepath.Join(dir, strings.Repeat("again_", i)+f), files.Read(t, filepath.Join(fixtures, f)))
			}
			_, err := rules.LoadWith(dir, rules.Options{MergeDomains: c.merge})
			switch {
			case c.accept && err != nil:
				t.Errorf("the reference accepts %v; FastLimit: %v", c.files, err)
			case !c.accept && err == nil:
				t.Errorf("the reference refuses %v; FastLimit accepts them", c.files)
			case err != nil && !strings.Contains(err.Error(), ".yaml"):
				t.Errorf("error %q names no file", err)
			case referenceMessages[c.name] != "" && err.Error() != filepath.Join(dir, referenceMessages[c.name]):
				t.Errorf("error %q, want %q alone", err, filepath.Join(dir, referenceMessages[c.name]))
			}
		})
	}
}
