package refstats

import (
	"testing"
)

// TestJointStats: each limit of a rule with several counts under its
// own stat key, its Label: the rule's key with "#" and the limit's name
// or place; a value_to_metric rule's with the request's value before it.
func TestJointStats(t *testing.T) {
	h := newRefHarness(t, "domain: d\ndescriptors:\n"+
		"  - {key: account, rate_limits: [{unit: minute, requests_per_unit: 2}, {name: daily, unit: day, requests_per_unit: 1000}]}\n"+
		"  - {key: user, value_to_metric: true, rate_limits: [{unit: minute, requests_per_unit: 1}, {name: daily, unit: day, requests_per_unit: 1}]}\n",
		0.8, nil)
	h.call(3, "d", desc("account", "a"))
	h.call(2, "d", desc("user", "alice"))
	got := map[string]uint64{}
	for _, c := range h.stats.Counters() {
		got[c.Name()] = c.Value()
	}
	const p = "ratelimit.service.rate_limit."
	for name, want := range map[string]uint64{
		p + "d.account#0.total_hits":        3,
		p + "d.account#0.over_limit":        1,
		p + "d.account#daily.total_hits":    3,
		p + "d.account#daily.within_limit":  3, // the third: within the day, though the minute denied it
		p + "d.user_alice#0.total_hits":     2,
		p + "d.user_alice#0.over_limit":     1,
		p + "d.user_alice#daily.over_limit": 1,
	} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d", name, got[name], want)
		}
	}
}
