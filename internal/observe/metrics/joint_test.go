package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// TestRuleCountersOfJoints: each limit of a rule with several counts its
// part of a decision under its own label, its own verdict: a hit the day
// denied is within the second's limit, though neither was charged.
func TestRuleCountersOfJoints(t *testing.T) {
	m, _ := newTestMetrics(t)
	plan := "    rate_limits: [{unit: second, requests_per_unit: 10}, {name: daily, unit: day, requests_per_unit: 1000}]\n"
	r, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: account\n" + plan +
		"  - key: user\n    value_to_metric: true\n" + plan)})
	if err != nil {
		t.Fatal(err)
	}
	m.Loaded(r, true)
	d := r.Set.Domain("d")
	decide := func(entries []descriptors.Entry, codes ...limiter.Code) {
		t.Helper()
		g := descriptors.Match(d, entries).Joint
		st := limiter.Status{Hits: 1, Parts: make([]limiter.Status, len(g))}
		for i, c := range codes {
			st.Parts[i] = limiter.Status{Code: c, Limit: g[i], Hits: 1, Remaining: 5}
			if c == limiter.OverLimit {
				st.Code, st.Limit = c, g[i]
			}
		}
		if st.Limit == nil {
			st.Limit = g[0]
		}
		m.Decided("d", view{entries}, &limiter.Response{Code: st.Code, Statuses: []limiter.Status{st}}, time.Millisecond)
	}
	account := []descriptors.Entry{{Key: "account", Value: "a"}}
	decide(account, limiter.OK, limiter.OK)
	decide(account, limiter.OK, limiter.OverLimit)
	user := []descriptors.Entry{{Key: "user", Value: "alice"}}
	decide(user, limiter.OverLimit, limiter.OK)
	for _, c := range []struct {
		rule               string
		hits, within, over float64
	}{
		{"d.account#0", 2, 2, 0},
		{"daily", 2, 1, 1}, // a named limit is labelled by its name
		{"d.user_alice#0", 1, 0, 1},
		{"d.user_alice#daily", 1, 1, 0},
	} {
		hits := testutil.ToFloat64(m.ruleHits.WithLabelValues("d", c.rule))
		within := testutil.ToFloat64(m.ruleWithin.WithLabelValues("d", c.rule))
		over := testutil.ToFloat64(m.ruleOver.WithLabelValues("d", c.rule))
		if hits != c.hits || within != c.within || over != c.over {
			t.Errorf("%s: hits %v within %v over %v, want %v %v %v", c.rule, hits, within, over, c.hits, c.within, c.over)
		}
	}
	if got := testutil.ToFloat64(m.limits); got != 4 {
		t.Errorf("fastlimit_config_limits = %v, want 4: each limit counts", got)
	}
}
