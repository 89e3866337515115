package settings

import (
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/observe/logging"
)

// TestLogLevelsDocumented: the levels a bad --log-level lists are the
// levels its usage (and so docs/settings.md) names.
func TestLogLevelsDocumented(t *testing.T) {
	_, err := logging.ParseLevel("verbose")
	if err == nil {
		t.Fatal("ParseLevel(verbose): no error")
	}
	fs := newFlagSet("test", &Settings{}, io.Discard)
	usage := fs.Lookup("log-level").Usage
	word := regexp.MustCompile(`[a-z]+`)
	for _, w := range word.FindAllString(strings.TrimPrefix(err.Error(), `"verbose" is not`), -1) {
		if w != "or" && !regexp.MustCompile(`\b`+w+`\b`).MatchString(usage) {
			t.Errorf("the error names %q, the usage %q does not", w, usage)
		}
	}
}

// TestParseRulesFlags: check's flags are the rules flags, with the
// server's defaults.
func TestParseRulesFlags(t *testing.T) {
	var out strings.Builder
	if _, _, err := ParseRules("check", []string{"-h"}, func(string) string { return "" }, &out); err != flag.ErrHelp {
		t.Fatalf("-h: %v", err)
	}
	got := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(got) != len(rulesCheckFlags) {
		t.Errorf("-h lists %q, want %q", got, rulesCheckFlags)
	}
	l, w, err := ParseRules("check", nil, func(k string) string { return map[string]string{"MERGE_DOMAIN_CONFIG": "true", "REDIS_URL": "x"}[k] }, io.Discard)
	if err != nil || len(w) != 0 || l.Dir != "config" || !l.Load.MergeDomains || l.Load.MaxFileBytes <= 0 {
		t.Errorf("ParseRules = %+v, %q, %v", l, w, err)
	}
}
