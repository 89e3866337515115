package top_test

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// testRules are a key-only rule, a nested one under a wildcard, one of a
// fixed value and a shadowed one.
//
//go:embed testdata/rules.yaml
var testRules string

// view is a request's descriptors as limiter.View shows them.
type view [][]descriptors.Entry

func (v view) Len() int          { return len(v) }
func (v view) Entries(i int) int { return len(v[i]) }
func (v view) Override(int) bool { return false }
func (v view) Entry(i, j int) (string, string) {
	return v[i][j].Key, v[i][j].Value
}

func newClock() *clock.Clock { return clock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

// fixture is a Tracker on testRules and the limits to decide with.
type fixture struct {
	t      *top.Tracker
	c      *clock.Clock
	set    *descriptors.Set
	loaded *rules.Loaded
}

func newFixture(tb testing.TB, o top.Options) *fixture {
	tb.Helper()
	loaded, err := rules.Parse(map[string][]byte{"d.yaml": []byte(testRules)})
	if err != nil {
		tb.Fatal(err)
	}
	c := newClock()
	if o.Clock == nil {
		o.Clock = c
	}
	f := &fixture{t: top.New(o), c: c, set: loaded.Set, loaded: loaded}
	f.t.Loaded(loaded, true)
	return f
}

// decide tells the tracker of one descriptor decided with code.
func (f *fixture) decide(entries []descriptors.Entry, code limiter.Code, hits uint64) {
	res := &limiter.Response{Code: code, Statuses: []limiter.Status{{
		Code: code, Limit: descriptors.Match(f.set.Domain("d"), entries), Hits: hits,
	}}}
	f.t.Decided("d", view{entries}, res, 0)
}

func user(v string) []descriptors.Entry { return []descriptors.Entry{{Key: "user", Value: v}} }

// TestHeavyHitterAmongAMillion: one identifier hit 100,000 times, a tenth
// of them over the limit, among 1,000,000 others hit once is first of both
// rankings with its exact count (no decay: the clock stands still); the
// summaries hold at most Keys (rounded up to 8) whatever the identifiers,
// and deciding them does not grow the heap.
func TestHeavyHitterAmongAMillion(t *testing.T) {
	f := newFixture(t, top.Options{Keys: 100})
	warm := user("warm")
	f.decide(warm, limiter.OverLimit, 1) // the summaries exist
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ids := make([]descriptors.Entry, 1)
	hot := user("hot")
	for i := range 1_000_000 {
		ids[0] = descriptors.Entry{Key: "user", Value: "u" + fmt.Sprint(i)}
		f.decide(ids, limiter.OK, 1)
		if i%10 == 0 {
			code := limiter.OK
			if i%100 == 0 {
				code = limiter.OverLimit
			}
			f.decide(hot, code, 1)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The loop's own strings are garbage; the summaries keep none.
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 4<<20 {
		t.Errorf("heap in use grew by %d bytes over 1,000,000 identifiers", grown)
	}
	for _, by := range []top.By{top.ByHits, top.ByOverLimit} {
		a := f.t.Top("d", "d.user", by, 0)
		if len(a.Rules) != 1 {
			t.Fatalf("%s: %d rules, want 1", by, len(a.Rules))
		}
		rk := a.Rules[0]
		if n := len(rk.Entries); n == 0 || n > 104 {
			t.Fatalf("%s: %d entries, want 1 to 104", by, n)
		}
		first := rk.Entries[0]
		want := map[top.By]float64{top.ByHits: 100_000, top.ByOverLimit: 10_000}[by]
		if strings.Join(first.Values, ",") != "hot" || first.Count-first.Error > want || first.Count < want {
			t.Errorf("%s: first %+v, want hot with %v in [count-error, count]", by, first, want)
		}
		if first.Descriptor[0] != (top.Pair{Key: "user", Value: "hot"}) || rk.Source != "d.yaml:3" {
			t.Errorf("%s: descriptor %+v, source %q", by, first.Descriptor, rk.Source)
		}
	}
}

// TestNoAllocations: a decision allocates nothing once the rule's
// summaries exist, for new identifiers and known ones alike.
func TestNoAllocations(t *testing.T) {
	f := newFixture(t, top.Options{Keys: 16})
	f.decide(user("a"), limiter.OverLimit, 1)
	views := make([]limiter.View, 64)
	for i := range views {
		views[i] = view{user(fmt.Sprint("id", i))}
	}
	res := &limiter.Response{Code: limiter.OverLimit, Statuses: []limiter.Status{{
		Code: limiter.OverLimit, Limit: descriptors.Match(f.set.Domain("d"), user("a")), Hits: 1}}}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		f.t.Decided("d", views[i%len(views)], res, 0)
		i++
	}); n != 0 {
		t.Errorf("%v allocations per decision", n)
	}
}

// TestDecay: a count decays by e over one Window, and hits weigh their
// time: a hit now counts e times one a Window ago.
func TestDecay(t *testing.T) {
	f := newFixture(t, top.Options{Window: time.Minute})
	for range 100 {
		f.decide(user("old"), limiter.OK, 1)
	}
	for range 12 { // crosses a landmark (every Window)
		f.c.Advance(5 * time.Second)
		f.t.Sync()
	}
	for range 100 {
		f.decide(user("new"), limiter.OK, 1)
	}
	got := map[string]float64{}
	for _, e := range f.t.Top("d", "", top.ByHits, 0).Rules[0].Entries {
		got[e.Values[0]] = e.Count
	}
	if math.Abs(got["old"]-100/math.E) > 0.2 || got["new"] != 100 {
		t.Errorf("counts %v, want old %.1f and new 100", got, 100/math.E)
	}
}

// TestRunSyncsEverySecond: Run reads the clock once a second, so that
// hits a Window apart weigh e apart; without it they weigh the same.
func TestRunSyncsEverySecond(t *testing.T) {
	f := newFixture(t, top.Options{Window: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.t.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	for range 100 {
		f.decide(user("old"), limiter.OK, 1)
	}
	nextSecond := func(p []time.Duration) bool { return len(p) == 1 && p[0] == time.Second }
	for range 60 {
		f.c.WaitFor(t, "Run to wait a second", nextSecond)
		f.c.Advance(time.Second)
	}
	f.c.WaitFor(t, "the last Sync", nextSecond)
	for range 100 {
		f.decide(user("new"), limiter.OK, 1)
	}
	got := map[string]float64{}
	for _, e := range f.t.Top("d", "", top.ByHits, 0).Rules[0].Entries {
		got[e.Values[0]] = e.Count
	}
	if math.Abs(got["old"]-100/math.E) > 0.2 || got["new"] != 100 {
		t.Errorf("counts %v after a Window of Run, want old %.1f and new 100", got, 100/math.E)
	}
}

// TestRankings: over-limit hits (shadowed ones included) rank apart from
// hits; refunds, fixed values and unlimited or unknown limits are
// handled; a rule's values leave out its fixed levels.
func TestRankings(t *testing.T) {
	f := newFixture(t, top.Options{})
	for range 5 {
		f.decide(user("many"), limiter.OK, 1)
	}
	f.decide(user("over"), limiter.OverLimit, 3)
	shadow := []descriptors.Entry{{Key: "shadow", Value: "s1"}}
	res := &limiter.Response{Statuses: []limiter.Status{{Limit: descriptors.Match(f.set.Domain("d"), shadow), Hits: 1, Shadowed: true}}}
	f.t.Decided("d", view{shadow}, res, 0)
	refund := &limiter.Response{Statuses: []limiter.Status{{Limit: descriptors.Match(f.set.Domain("d"), user("over")), Hits: 9, Refund: true}}}
	f.t.Decided("d", view{user("over")}, refund, 0)
	nested := []descriptors.Entry{{Key: "path", Value: "/api/x"}, {Key: "ip", Value: "10.0.0.1"}}
	f.decide(nested, limiter.OverLimit, 1)
	f.decide([]descriptors.Entry{{Key: "fixed", Value: "one"}}, limiter.OK, 1)
	f.t.Decided("d", view{user("x")}, &limiter.Response{Statuses: []limiter.Status{{Limit: descriptors.NewLimit(1, descriptors.Second), Hits: 1}}}, 0)

	byRule := func(by top.By) map[string]string {
		out := map[string]string{}
		for _, rk := range f.t.Top("d", "", by, 0).Rules {
			var es []string
			for _, e := range rk.Entries {
				es = append(es, e.String())
			}
			out[rk.Rule] = strings.Join(es, " ")
		}
		return out
	}
	wantHits := map[string]string{"d.user": "many (5) over (3)", "d.shadow": "s1 (1)", "d.path_/api/*.ip": "/api/x,10.0.0.1 (1)", "d.fixed_one": " (1)"}
	wantOver := map[string]string{"d.user": "over (3)", "d.shadow": "s1 (1)", "d.path_/api/*.ip": "/api/x,10.0.0.1 (1)"}
	for by, want := range map[top.By]map[string]string{top.ByHits: wantHits, top.ByOverLimit: wantOver} {
		if got := byRule(by); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", by, got, want)
		}
	}
	rk := f.t.Top("d", "d.path_/api/*.ip", top.ByOverLimit, 1).Rules[0]
	if d := rk.Entries[0].Descriptor; fmt.Sprint(d) != "[{path /api/x} {ip 10.0.0.1}]" {
		t.Errorf("nested descriptor %v", d)
	}
	if a := f.t.Top("other", "", top.ByHits, 0); len(a.Rules) != 0 {
		t.Errorf("another domain's top: %+v", a)
	}
}

// TestLongIdentifiers: a 64 KiB value is kept as its first bytes, marked
// truncated; two that share those bytes stay apart by their hash.
func TestLongIdentifiers(t *testing.T) {
	f := newFixture(t, top.Options{})
	long := strings.Repeat("x", 64<<10)
	f.decide(user(long+"a"), limiter.OK, 2)
	f.decide(user(long+"b"), limiter.OK, 1)
	es := f.t.Top("d", "d.user", top.ByHits, 0).Rules[0].Entries
	if len(es) != 2 || es[0].Hash == es[1].Hash || !es[0].Truncated || es[0].Count != 2 || len(es[0].Values[0]) != 63 {
		t.Errorf("entries %+v", es)
	}
}

// TestReloadKeepsRules: a rule whose path stays keeps its counts across a
// reload; a removed one's are dropped.
func TestReloadKeepsRules(t *testing.T) {
	f := newFixture(t, top.Options{})
	f.decide(user("a"), limiter.OK, 1)
	f.decide([]descriptors.Entry{{Key: "fixed", Value: "one"}}, limiter.OK, 1)
	next, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")})
	if err != nil {
		t.Fatal(err)
	}
	f.t.Loaded(next, true)
	a := f.t.Top("d", "", top.ByHits, 0)
	if len(a.Rules) != 1 || a.Rules[0].Rule != "d.user" || a.Rules[0].Entries[0].Count != 1 {
		t.Errorf("after reload: %+v", a.Rules)
	}
}

// TestLogLine: a rule that limited logs its top over-limit identifiers at
// the next Sync, then at most once a minute, and not while it limits none.
func TestLogLine(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	f := newFixture(t, top.Options{LogLimited: true, Log: zap.New(core)})
	f.t.Sync()
	f.decide(user("bad"), limiter.OverLimit, 1)
	for range 70 { // 70 s of limiting
		f.t.Sync()
		f.decide(user("bad"), limiter.OverLimit, 1)
		f.c.Advance(time.Second)
	}
	f.t.Sync()
	lines := logs.FilterMessage("top over-limit identifiers").All()
	if len(lines) != 2 {
		t.Fatalf("%d log lines in 70 s, want 2", len(lines))
	}
	if fs := lines[0].ContextMap(); fs["rule"] != "d.user" || fmt.Sprint(fs["top"]) != "[bad (1)]" {
		t.Errorf("log line %v", fs)
	}
	f.c.Advance(2 * time.Minute)
	f.t.Sync()
	if n := logs.FilterMessage("top over-limit identifiers").Len(); n != 3 {
		t.Errorf("%d lines, want a third for the hits since the second", n)
	}
	f.c.Advance(2 * time.Minute)
	f.t.Sync()
	if n := logs.FilterMessage("top over-limit identifiers").Len(); n != 3 {
		t.Errorf("%d lines, want none without over-limit hits", n)
	}
}

// TestConcurrent: decisions from many goroutines beside queries, syncs
// and reloads lose no hit of an identifier the summary keeps.
func TestConcurrent(t *testing.T) {
	f := newFixture(t, top.Options{Keys: 64})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				f.decide(user(fmt.Sprint("w", w%2)), limiter.OverLimit, 1)
				if i%100 == 0 {
					f.t.Top("d", "", top.ByOverLimit, 3)
					f.t.Sync()
					f.t.Loaded(f.loaded, false)
				}
			}
		})
	}
	wg.Wait()
	for _, e := range f.t.Top("d", "d.user", top.ByOverLimit, 0).Rules[0].Entries {
		if e.Count != 8000 || e.Error != 0 {
			t.Errorf("%v: %v ± %v, want 8000", e.Values, e.Count, e.Error)
		}
	}
}
