package top_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestMerge: three replicas see parts of one skewed stream; their merged
// answer bounds every identifier's true count by [count-error, count],
// ranks the heaviest first with the sum of the replicas' counts, keeps n
// entries, and bounds the counts of those it leaves out.
func TestMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fs := []*fixture{newFixture(t, top.Options{Keys: 16}), newFixture(t, top.Options{Keys: 16}), newFixture(t, top.Options{Keys: 16})}
	truth := map[string]float64{}
	for range 30_000 {
		id := fmt.Sprint("u", rng.IntN(2000))
		if rng.IntN(4) == 0 {
			id = fmt.Sprint("heavy", rng.IntN(3))
		}
		truth[id]++
		fs[rng.IntN(len(fs))].decide(user(id), limiter.OK, 1)
	}
	var answers []top.Answer
	for _, f := range fs {
		answers = append(answers, f.t.Top("d", "", top.ByHits, 0))
	}
	m := top.Merge(answers, 10)
	if m.Replicas != 3 || len(m.Rules) != 1 || len(m.Rules[0].Entries) != 10 {
		t.Fatalf("merged %d replicas, rules %+v", m.Replicas, m.Rules)
	}
	for i, e := range m.Rules[0].Entries {
		id := e.Values[0]
		if got := truth[id]; got < e.Count-e.Error-0.1 || got > e.Count+0.1 {
			t.Errorf("%s: true %v outside [%v, %v]", id, got, e.Count-e.Error, e.Count)
		}
		if i < 3 && !strings.HasPrefix(id, "heavy") {
			t.Errorf("entry %d is %s, want the heavy identifiers first", i, id)
		}
	}
	var sum float64
	for _, a := range answers {
		for _, e := range a.Rules[0].Entries {
			if e.Hash == m.Rules[0].Entries[0].Hash {
				sum += e.Count
			}
		}
	}
	if first := m.Rules[0].Entries[0]; first.Count != sum {
		t.Errorf("merged count %v, want the replicas' sum %v", first.Count, sum)
	}
	listed := map[string]bool{}
	for _, e := range m.Rules[0].Entries {
		listed[e.Values[0]] = true
	}
	for id, n := range truth {
		if !listed[id] && n > m.Rules[0].Unlisted+0.1 {
			t.Errorf("%s, not listed, has %v, over the unlisted bound %v", id, n, m.Rules[0].Unlisted)
		}
	}
}
