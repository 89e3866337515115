package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

const groupRules = "domain: plan\ndescriptors:\n  - key: account\n" +
	"    rate_limits: [{unit: second, requests_per_unit: 10}, {name: daily, unit: day, requests_per_unit: 1000}]\n"

// TestGroupListings: /v1/usage shows each limit of a rule with several,
// the one that decides on top; /v1/rules and /rlconfig have a line for
// each, by its Label.
func TestGroupListings(t *testing.T) {
	s, _ := testServer(t, map[string]string{"plan.yaml": groupRules})
	for range 3 {
		s.decide(t, "plan", "account", "a")
	}
	code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/usage?domain=plan&descriptor=account=a")
	if code != http.StatusOK {
		t.Fatalf("/v1/usage: %d %s", code, body)
	}
	var u admin.Usage
	if err := json.Unmarshal([]byte(body), &u); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if u.Rule != "plan.account#0" || *u.Remaining != 7 || len(u.Limits) != 2 {
		t.Fatalf("/v1/usage = %s, want the second's limit (7 of 10 left) on top, and both limits", body)
	}
	if l := u.Limits[1]; l.Rule != "plan.account#daily" || l.Name != "daily" || l.Unit != "DAY" || *l.Limit != 1000 || *l.Remaining != 997 {
		t.Errorf("/v1/usage's daily limit: %+v", l)
	}
	for path, want := range map[string][]string{
		"/v1/rules": {"plan.account#0: algorithm=fixed_window unit=SECOND requests_per_unit=10",
			"plan.account#daily: name=daily algorithm=fixed_window unit=DAY requests_per_unit=1000", "2 limits"},
		"/rlconfig": {"plan.account#0: unit=SECOND requests_per_unit=10", "plan.account#daily: unit=DAY requests_per_unit=1000"},
	} {
		_, body := scrape.Get(t, "http://"+s.AdminAddr()+path)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s:\n%s\nwant a line with %q", path, body, w)
			}
		}
	}
}
