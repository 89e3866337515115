package limitertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// testAllOrNothing checks limiter.AllOrNothingStore.TakeAll on stores that
// implement it. The oracle is Take: a call's results must be what Take
// answers for the same ops after the calls that committed, and the store
// must hold afterwards what Take would have left.
func testAllOrNothing(t *testing.T, newStore func(*testing.T) limiter.Store) {
	if _, ok := newStore(t).(limiter.AllOrNothingStore); !ok {
		t.Skip("store does not implement limiter.AllOrNothingStore")
	}
	allOrNothingStore := func(t *testing.T) limiter.AllOrNothingStore { return newStore(t).(limiter.AllOrNothingStore) }
	t.Run("RejectWritesNothing", func(t *testing.T) { testRejectWritesNothing(t, allOrNothingStore(t)) })
	t.Run("Vetoes", func(t *testing.T) { testVetoes(t, allOrNothingStore(t)) })
	t.Run("Peeks", func(t *testing.T) { testAllOrNothingPeeks(t, allOrNothingStore(t)) })
	t.Run("OneInstant", func(t *testing.T) { testOneInstant(t, allOrNothingStore(t)) })
	t.Run("MatchesTake", func(t *testing.T) { testMatchesTake(t, allOrNothingStore(t)) })
	t.Run("Concurrent", func(t *testing.T) { testAllOrNothingConcurrent(t, allOrNothingStore(t)) })
	t.Run("Refunds", func(t *testing.T) { testAllOrNothingRefunds(t, allOrNothingStore(t)) })
}

// taggedKeys returns n fresh base keys sharing one hash tag, in the scheme
// of limiter.AppendAllOrNothingKey, so that one call may use them all in Redis
// Cluster too.
func taggedKeys(t *testing.T, n int) []string {
	tag := strings.TrimSuffix(strings.TrimPrefix(newKey(t), KeyPrefix), ":default:")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%s/k%d:default:", KeyPrefix, tag, i)
	}
	return keys
}

func takeAll(t *testing.T, st limiter.AllOrNothingStore, ops []limiter.Op) []limiter.Result {
	t.Helper()
	res := make([]limiter.Result, len(ops))
	if err := st.TakeAll(context.Background(), ops, res); err != nil {
		t.Fatalf("TakeAll: %v", err)
	}
	return res
}

// algorithmOps returns one op per algorithm, each allowing requests hits
// per hour, at base+at with cost one hit.
func algorithmOps(requests, at int64) []limiter.Op {
	ops := []limiter.Op{
		{Algorithm: descriptors.FixedWindow, Limit: requests * milli, Window: hour},
		{Algorithm: descriptors.SlidingWindow, Limit: requests * milli, Window: hour},
		tokenOp(requests, hour, requests),
	}
	for i := range ops {
		ops[i].Now, ops[i].Cost = base+at, milli
	}
	return ops
}

// testRejectWritesNothing: for every pair of algorithms, a call whose
// second op is over its limit answers as Take would, and leaves both keys
// as they were, the over one's fixed-window count included.
func testRejectWritesNothing(t *testing.T, st limiter.AllOrNothingStore) {
	const at = 5 * minute
	for _, a := range algorithmOps(5, at) {
		for _, b := range algorithmOps(1, at) {
			keys, twins := taggedKeys(t, 2), taggedKeys(t, 2)
			a.Key, b.Key = keys[0], keys[1]
			// Use b up, on both key sets.
			take(t, st, []limiter.Op{b, withKey(b, twins[1])}, 2)

			got := takeAll(t, st, []limiter.Op{a, b})
			want := take(t, st, []limiter.Op{withKey(a, twins[0]), withKey(b, twins[1])}, 2)
			name := a.Algorithm.String() + "+" + b.Algorithm.String()
			if got[0] != want[0] || got[1] != want[1] || !got[0].Allowed || got[1].Allowed {
				t.Errorf("%s: TakeAll = %s %s, want Take's %s %s (allowed, denied)",
					name, fmtResult(got[0]), fmtResult(got[1]), fmtResult(want[0]), fmtResult(want[1]))
			}

			// The keys are as before the call: a untouched, b used up once.
			peekA, peekB := a, b
			peekA.Cost, peekB.Cost = 0, 0
			fresh, once := taggedKeys(t, 2), taggedKeys(t, 1)
			take(t, st, []limiter.Op{withKey(b, once[0])}, 1)
			got = take(t, st, []limiter.Op{peekA, peekB}, 2)
			want = take(t, st, []limiter.Op{withKey(peekA, fresh[0]), withKey(peekB, once[0])}, 2)
			if got[0] != want[0] || got[1] != want[1] {
				t.Errorf("%s: after the rejected call, peeks = %s %s, want %s %s (as if it never ran)",
					name, fmtResult(got[0]), fmtResult(got[1]), fmtResult(want[0]), fmtResult(want[1]))
			}
			checkExpiries(t, st, keys[0], 0, map[string]int64{})
		}
	}
}

func withKey(op limiter.Op, key string) limiter.Op {
	op.Key = key
	return op
}

// testVetoes checks when a denial rejects a call: always (VetoAlone),
// never (VetoNone, shadow mode), or when every VetoQuota op is denied
// (quota mode).
func testVetoes(t *testing.T, st limiter.AllOrNothingStore) {
	const at = 7 * minute
	fixed := func(requests int64, veto limiter.Veto) limiter.Op {
		return limiter.Op{Algorithm: descriptors.FixedWindow, Limit: requests * milli, Window: hour,
			Cost: milli, Now: base + at, Veto: veto}
	}
	over := func(veto limiter.Veto) limiter.Op { return fixed(0, veto) } // always denied
	ok := func(veto limiter.Veto) limiter.Op { return fixed(10, veto) }
	cases := []struct {
		name   string
		ops    []limiter.Op
		commit bool
	}{
		{"all allowed", []limiter.Op{ok(limiter.VetoAlone), ok(limiter.VetoNone), ok(limiter.VetoQuota)}, true},
		{"one denied", []limiter.Op{ok(limiter.VetoAlone), over(limiter.VetoAlone)}, false},
		{"shadow denied", []limiter.Op{ok(limiter.VetoAlone), over(limiter.VetoNone)}, true},
		{"one of two quota denied", []limiter.Op{ok(limiter.VetoAlone), over(limiter.VetoQuota), ok(limiter.VetoQuota)}, true},
		{"every quota denied", []limiter.Op{ok(limiter.VetoAlone), over(limiter.VetoQuota), over(limiter.VetoQuota)}, false},
		{"the only quota denied", []limiter.Op{over(limiter.VetoQuota), ok(limiter.VetoNone)}, false},
		{"quota and shadow denied", []limiter.Op{ok(limiter.VetoAlone), over(limiter.VetoQuota), ok(limiter.VetoQuota), over(limiter.VetoNone)}, true},
	}
	for _, tc := range cases {
		keys := taggedKeys(t, len(tc.ops))
		for i := range tc.ops {
			tc.ops[i].Key = keys[i]
		}
		if got := takeAll(t, st, tc.ops); limiter.Rejects(tc.ops, got) == tc.commit {
			t.Errorf("%s: results %v, want commit %v", tc.name, got, tc.commit)
		}
		// A committed call counted one hit on every key, denied fixed
		// windows included; a rejected one none.
		after := take(t, st, peeks(tc.ops), len(tc.ops))
		for i, r := range after {
			want := tc.ops[i].Limit
			if tc.commit {
				want -= milli
			}
			if want < 0 {
				want = 0
			}
			if r.Remaining != want {
				t.Errorf("%s: op %d remaining %d after the call, want %d (commit %v)", tc.name, i, r.Remaining, want, tc.commit)
			}
		}
	}
}

func peeks(ops []limiter.Op) []limiter.Op {
	out := slices.Clone(ops)
	for i := range out {
		out[i].Cost = 0
	}
	return out
}

// testAllOrNothingPeeks: a call of peeks writes nothing, allowed or not.
func testAllOrNothingPeeks(t *testing.T, st limiter.AllOrNothingStore) {
	ops := algorithmOps(2, 9*minute)
	keys := taggedKeys(t, len(ops))
	for i := range ops {
		ops[i].Key = keys[i]
	}
	res := takeAll(t, st, peeks(ops))
	for i, r := range res {
		if !r.Allowed {
			t.Errorf("peek %d (%s) on a fresh key = %s", i, ops[i].Algorithm, fmtResult(r))
		}
	}
	take(t, st, ops[:1], 1)
	take(t, st, ops[:1], 1)
	take(t, st, ops[:1], 1) // the fixed window is over: count 3 of 2
	res = takeAll(t, st, peeks(ops))
	if res[0].Allowed || !res[1].Allowed || !res[2].Allowed {
		t.Errorf("peeks after the fixed window went over = %v", res)
	}
	for _, k := range keys[1:] {
		checkExpiries(t, st, k, 0, map[string]int64{})
	}
}

// testOneInstant: ops of one call must share one Now.
func testOneInstant(t *testing.T, st limiter.AllOrNothingStore) {
	ops := algorithmOps(2, 11*minute)
	keys := taggedKeys(t, len(ops))
	for i := range ops {
		ops[i].Key = keys[i]
	}
	ops[2].Now++
	if err := st.TakeAll(context.Background(), ops, make([]limiter.Result, len(ops))); err == nil {
		t.Error("TakeAll accepted ops with different times")
	}
	for _, k := range keys {
		checkExpiries(t, st, k, 0, map[string]int64{})
	}
}

// testMatchesTake checks random calls (repeated keys, peeks, odd costs,
// every veto) against Take replaying the committed calls on fresh keys,
// and every key's expiry at the end.
func testMatchesTake(t *testing.T, st limiter.AllOrNothingStore) {
	rng := rand.New(rand.NewPCG(17, 19))
	const slots, calls = 6, 120
	windows := []int64{second, minute, hour, day}
	costs := []int64{0, 500, 1000, 1000, 1000, 1500, 3000}
	tmpl := randomTemplates(rng, slots, windows)
	keys := taggedKeys(t, slots)
	var history [][]limiter.Op // committed calls, by slot in Key
	// replay runs history and then call through Take on fresh keys and
	// returns call's results and the keys used.
	replay := func(call []limiter.Op) ([]limiter.Result, []string) {
		fresh := taggedKeys(t, slots)
		var in []limiter.Op
		for _, c := range append(slices.Clone(history), call) {
			for _, op := range c {
				in = append(in, withKey(op, fresh[slotOf(op.Key)]))
			}
		}
		res := take(t, st, in, batch)
		return res[len(in)-len(call):], fresh
	}

	now := base + rng.Int64N(hour)
	commits, rejects := 0, 0
	for c := range calls {
		if rng.IntN(3) == 0 {
			now += rng.Int64N(2 * minute)
		}
		call := make([]limiter.Op, 1+rng.IntN(4))
		for i := range call {
			s := rng.IntN(slots)
			call[i] = tmpl[s]
			call[i].Key = fmt.Sprint(s) // a slot for replay; the real key below
			call[i].Now, call[i].Cost = now, costs[rng.IntN(len(costs))]
			call[i].Veto = []limiter.Veto{limiter.VetoAlone, limiter.VetoAlone, limiter.VetoNone, limiter.VetoQuota}[rng.IntN(4)]
		}
		want, _ := replay(call)
		real := slices.Clone(call)
		for i := range real {
			real[i].Key = keys[slotOf(call[i].Key)]
		}
		got := takeAll(t, st, real)
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("call %d op %d (%s, slot %s, cost %d, veto %d): TakeAll %s, Take %s",
					c, i, call[i].Algorithm, call[i].Key, call[i].Cost, call[i].Veto, fmtResult(got[i]), fmtResult(want[i]))
			}
		}
		if limiter.Rejects(call, want) {
			rejects++
			continue
		}
		commits++
		history = append(history, call)
	}
	if commits < calls/5 || rejects < calls/5 {
		t.Errorf("%d commits and %d rejects of %d calls; the test needs more of both", commits, rejects, calls)
	}

	_, fresh := replay(nil)
	sameKeys(t, st, keys, fresh, tmpl, now)
}

func slotOf(key string) int {
	var s int
	fmt.Sscan(key, &s)
	return s
}

// trimKeys maps suffixes of prefix to expiries relative to base.
func trimKeys(m map[string]int64, prefix string) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[strings.TrimPrefix(k, prefix)] = v - base
	}
	return out
}

// testAllOrNothingConcurrent races calls on a limit of 100 and one of 50,
// in both orders: exactly 50 commit, charging the larger limit 50 times.
func testAllOrNothingConcurrent(t *testing.T, st limiter.AllOrNothingStore) {
	const workers, calls = 8, 20
	for _, alg := range []descriptors.Algorithm{descriptors.FixedWindow, descriptors.SlidingWindow, descriptors.TokenBucket} {
		big := algorithmOps(100, 13*minute)[alg]
		small := algorithmOps(50, 13*minute)[alg]
		keys := taggedKeys(t, 2)
		big.Key, small.Key = keys[0], keys[1]
		var mu sync.Mutex
		commits := 0
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				ops := []limiter.Op{big, small}
				if w%2 == 1 {
					ops = []limiter.Op{small, big}
				}
				res := make([]limiter.Result, 2)
				for range calls {
					if err := st.TakeAll(context.Background(), ops, res); err != nil {
						t.Errorf("TakeAll: %v", err)
						return
					}
					if !limiter.Rejects(ops, res) {
						mu.Lock()
						commits++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if commits != 50 {
			t.Errorf("%s: %d of %d calls committed, want 50", alg, commits, workers*calls)
		}
		after := take(t, st, peeks([]limiter.Op{big, small}), 2)
		if after[0].Remaining != 50*milli || after[1].Remaining != 0 || !after[1].Allowed {
			t.Errorf("%s: after the race, big %s, small %s; want 50 left and 0 left (not over)",
				alg, fmtResult(after[0]), fmtResult(after[1]))
		}
	}
}
