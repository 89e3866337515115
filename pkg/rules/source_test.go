package rules_test

import (
	"testing"

	"github.com/fastlimit/fastlimit/pkg/rules"
)

// TestLimitSource: every compiled limit names its rule's file and line.
func TestLimitSource(t *testing.T) {
	r, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(`domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 50}
`)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"shop.user": "shop.yaml:3", "shop.plan_gold.user": "shop.yaml:8"}
	for _, l := range r.Set.Limits() {
		if l.Source != want[l.Path] {
			t.Errorf("%s: source %q, want %q", l.Path, l.Source, want[l.Path])
		}
	}
}
