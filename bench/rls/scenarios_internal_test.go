package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/rules"
)

func TestPlan(t *testing.T) {
	o := &options{callers: 64, sweep: []int{1, 4, 64, 256}}
	var err error
	if o.scenarios, err = parseScenarios("cluster, sweep,fw,unlimited"); err != nil {
		t.Fatal(err)
	}
	got := plan(o)
	want := []runSpec{
		{Key: "unlimited", Descriptors: 1, Callers: 64},
		{Key: "fw", Descriptors: 1, Callers: 64}, // the sweep's 64 too
		{Key: "fw", Descriptors: 1, Callers: 1},
		{Key: "fw", Descriptors: 1, Callers: 4},
		{Key: "fw", Descriptors: 1, Callers: 256},
		{Key: "fw", Descriptors: 1, Callers: 64, Cluster: true},
		{Key: "fw", Descriptors: 3, Callers: 64, Cluster: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("plan\n%v\nwant\n%v", got, want)
	}
}

func TestParseScenarios(t *testing.T) {
	all, err := parseScenarios("all")
	if err != nil || len(all) != len(scenarios) {
		t.Fatalf("all: %v, %v", all, err)
	}
	def, err := parseScenarios(defaultScenarios)
	if err != nil || slices.Contains(def, "cluster") {
		t.Fatalf("defaults %v, %v: want every scenario but the cluster", def, err)
	}
	for _, bad := range []string{"", " , ", "fw,zipf"} {
		if _, err := parseScenarios(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestEveryScenarioHasItsRule checks the catalog against the rules, and
// that the reference is only asked for what it has.
func TestEveryScenarioHasItsRule(t *testing.T) {
	o := &options{callers: 8, sweep: []int{1, 2}}
	ref := &binary{kind: kindReference}
	for _, s := range scenarios {
		for _, spec := range s.specs(o) {
			r, ok := ruleByKey(spec.Key)
			if !ok {
				t.Fatalf("scenario %s: no rule %q", s.name, spec.Key)
			}
			if ref.supports(spec.Key) != (r.algorithm == "") {
				t.Errorf("scenario %s: the reference supports %q: %v", s.name, spec.Key, ref.supports(spec.Key))
			}
			if spec.title() == "" || strings.Contains(spec.title(), "%!") {
				t.Errorf("scenario %s: title %q", s.name, spec.title())
			}
		}
	}
}

// TestRulesLoad checks that both rules files are valid FastLimit rules,
// and that the reference's holds no FastLimit extension (its loader
// refuses unknown keys).
func TestRulesLoad(t *testing.T) {
	for _, all := range []bool{true, false} {
		text := rulesYAML(all)
		if _, err := rules.Parse(map[string][]byte{rulesFile: []byte(text)}); err != nil {
			t.Fatalf("all=%v: %v\n%s", all, err, text)
		}
		for _, r := range benchRules {
			has := strings.Contains(text, "key: "+r.key+"\n")
			if want := all || r.algorithm == ""; has != want {
				t.Errorf("all=%v: rule %s present %v", all, r.key, has)
			}
		}
		if !all && strings.Contains(text, "algorithm") {
			t.Errorf("reference rules name an algorithm:\n%s", text)
		}
	}
}

func TestFlags(t *testing.T) {
	o, err := parseFlags([]string{"--quick", "--rounds", "2", "--compare-env", "A=b", "--sweep", "1, 8"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.rounds != 2 || o.duration != time.Second || o.warmup != 200*time.Millisecond || o.out != "-" || o.raw != "-" {
		t.Fatalf("--quick with --rounds 2: rounds %d duration %v warmup %v out %q raw %q", o.rounds, o.duration, o.warmup, o.out, o.raw)
	}
	if !slices.Equal(o.sweep, []int{1, 8}) || !slices.Equal(o.compareEnv, []string{"A=b"}) {
		t.Fatalf("sweep %v compare-env %v", o.sweep, o.compareEnv)
	}
	if !slices.Equal(o.serverFlags, []string{"--store-timeout", "2s", "--drain", "0s"}) {
		t.Fatalf("server flags %q", o.serverFlags)
	}
	for _, args := range [][]string{
		{"--rounds", "0"}, {"--duration", "0s"}, {"--sweep", "1,x"}, {"--compare-env", "novalue"},
		{"--scenarios", "nope"}, {"--callers", "0"}, {"extra"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if got := quoteArgs([]string{"--compare", "/a b/c", "--compare-env", "X=it's"}); got != ` --compare '/a b/c' --compare-env 'X=it'\''s'` {
		t.Errorf("quoteArgs: %s", got)
	}
}

// TestRedisCostScenarios: "redis-cost" names issue 18's runs: windows of
// a minute on the default identifiers, on 1,000 and on one, per algorithm,
// and the minute's sweep; their titles say the identifiers.
func TestRedisCostScenarios(t *testing.T) {
	names, err := parseScenarios("redis-cost")
	if err != nil {
		t.Fatal(err)
	}
	o := &options{scenarios: names, callers: 64, sweep: []int{1, 64}}
	got := plan(o)
	for _, want := range []runSpec{
		{Key: "fwm", Descriptors: 3, Callers: 64},
		{Key: "swm", Descriptors: 1, Callers: 64},
		{Key: "tbm", Descriptors: 1, Callers: 64, Keys: idsFew},
		{Key: "fwm", Descriptors: 1, Callers: 64, Keys: 1},
		{Key: "fwm", Descriptors: 1, Callers: 1},
	} {
		if !slices.Contains(got, want) {
			t.Errorf("plan %v lacks %+v", got, want)
		}
	}
	if title := (runSpec{Key: "tbm", Descriptors: 1, Callers: 64, Keys: idsFew}).title(); !strings.Contains(title, "1,000 identifiers") {
		t.Errorf("title %q does not say its identifiers", title)
	}
	if title := (runSpec{Key: "fwm", Descriptors: 1, Callers: 64, Keys: 1}).title(); !strings.HasSuffix(title, "1 identifier") {
		t.Errorf("title %q does not say its identifier", title)
	}
}
