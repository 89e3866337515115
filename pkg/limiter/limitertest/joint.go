package limitertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// testJoints checks joints (limiter.Op.Joined): by hand, 10 a second and
// 1,000 a day on one descriptor; then random calls of joints and ops on
// their own against Take deciding each joint's ops alone after the joints
// that committed, with Take and, on an AtomicStore, with TakeAll.
func testJoints(t *testing.T, newStore func(*testing.T) limiter.Store) {
	t.Run("SecondAndDay", func(t *testing.T) { testSecondAndDay(t, newStore(t)) })
	t.Run("Concurrent", func(t *testing.T) { testJointsConcurrent(t, newStore(t)) })
	t.Run("MatchesTake", func(t *testing.T) {
		testJointsMatchTake(t, newStore(t), false, [2]uint64{31, 37}, false)
	})
	t.Run("AllOrNothingMatchesTake", func(t *testing.T) {
		st := newStore(t)
		if _, ok := st.(limiter.AtomicStore); !ok {
			t.Skip("store does not implement limiter.AtomicStore")
		}
		testJointsMatchTake(t, st, true, [2]uint64{41, 43}, false)
	})
	t.Run("DebitMatchesTake", func(t *testing.T) {
		testJointsMatchTake(t, newStore(t), false, [2]uint64{47, 53}, true)
	})
	t.Run("AllOrNothingDebitMatchesTake", func(t *testing.T) {
		st := newStore(t)
		if _, ok := st.(limiter.AtomicStore); !ok {
			t.Skip("store does not implement limiter.AtomicStore")
		}
		testJointsMatchTake(t, st, true, [2]uint64{59, 61}, true)
	})
}

// jointStep is a joint of every op of a test at at, with cost, and the
// results of each.
type jointStep struct {
	at, cost int64
	want     []limiter.Result
}

// secondAndDaySteps are the steps of fixed windows of 10 a second and
// 1,000 a day: ten a second for 100 s, an eleventh each second (denied by
// the second, the last one by both, charging neither) and a peek after it;
// at 100 s, the day denies, charging neither, though the second is fresh;
// the next day both allow.
func secondAndDaySteps() []jointStep {
	var steps []jointStep
	for s := range int64(100) {
		for i := range int64(10) {
			at := s*second + i
			steps = append(steps, jointStep{at, milli, []limiter.Result{
				allow((9-i)*milli, second-i), allow((999-10*s-i)*milli, day-at)}})
		}
		at := s*second + 10
		daily := allow((1000-10*s-11)*milli, day-at) // as if charged
		if s == 99 {
			daily = deny(0, day-at, day-at)
		}
		steps = append(steps,
			jointStep{at, milli, []limiter.Result{deny(0, second-10, second-10), daily}},
			jointStep{at, 0, []limiter.Result{allow(0, second-10), allow((990-10*s)*milli, day-at)}})
	}
	const at = 100 * second
	return append(steps,
		jointStep{at, milli, []limiter.Result{allow(9*milli, second), deny(0, day-at, day-at)}},
		jointStep{at, 0, []limiter.Result{allow(10*milli, second), allow(0, day-at)}},
		jointStep{day, milli, []limiter.Result{allow(9*milli, second), allow(999*milli, day)}})
}

func testSecondAndDay(t *testing.T, st limiter.Store) {
	ops := []limiter.Op{
		{Algorithm: descriptors.FixedWindow, Limit: 10 * milli, Window: second},
		{Algorithm: descriptors.FixedWindow, Limit: 1000 * milli, Window: day},
	}
	steps := secondAndDaySteps()
	for _, perCall := range []int{len(steps), 1} {
		keys := atomicKeys(t, len(ops))
		var in []limiter.Op
		for _, s := range steps {
			for i, op := range ops {
				op.Key, op.Now, op.Cost, op.Joined = keys[i], base+s.at, s.cost, i > 0
				in = append(in, op)
			}
		}
		got := take(t, st, in, perCall*len(ops))
		for j, s := range steps {
			for i := range ops {
				if r := got[j*len(ops)+i]; r != s.want[i] {
					t.Errorf("%d joints a call: step %d (base%+d, cost %d) op %d = %s, want %s",
						perCall, j, s.at, s.cost, i, fmtResult(r), fmtResult(s.want[i]))
				}
			}
		}
		// The second's windows of the first 100 s have expired by day-1.
		checkExpiries(t, st, keys[0], day-1, map[string]int64{windowSuffix(day): day + second})
		checkExpiries(t, st, keys[1], day-1, map[string]int64{windowSuffix(0): day, windowSuffix(day): 2 * day})
	}
}

// testJointsConcurrent races joints of a sliding window of 30 a minute, a
// fixed window of 20 a day and a bucket of burst 25, all at one instant:
// exactly 20 pass, and a denied joint charges none of its limits, so that
// the window and the bucket are left with 10 and 5.
func testJointsConcurrent(t *testing.T, st limiter.Store) {
	const callers, each = 8, 50
	keys := atomicKeys(t, 3)
	joint := func(cost int64) []limiter.Op {
		ops := []limiter.Op{
			{Algorithm: descriptors.SlidingWindow, Limit: 30 * milli, Window: minute},
			{Algorithm: descriptors.FixedWindow, Limit: 20 * milli, Window: day},
			tokenOp(25, minute, 25),
		}
		for i := range ops {
			ops[i].Key, ops[i].Now, ops[i].Cost, ops[i].Joined = keys[i], base, cost, i > 0
		}
		return ops
	}
	allowed := make(chan int, callers)
	errs := make(chan error, callers)
	for range callers {
		go func() {
			n := 0
			for range each {
				res := make([]limiter.Result, 3)
				if err := st.Take(context.Background(), joint(milli), res); err != nil {
					errs <- err
					return
				}
				if res[0].Allowed && res[1].Allowed && res[2].Allowed { // a joint passes if each allows
					n++
				}
			}
			allowed <- n
		}()
	}
	total := 0
	for range callers {
		select {
		case err := <-errs:
			t.Fatal(err)
		case n := <-allowed:
			total += n
		}
	}
	if total != 20 {
		t.Fatalf("%d joints allowed, want 20 (the day's limit)", total)
	}
	got := take(t, st, joint(0), 3)
	for i, want := range []int64{10, 0, 5} {
		if got[i].Remaining != want*milli {
			t.Errorf("limit %d: remaining %d, want %d: a denied joint charged it", i, got[i].Remaining, want*milli)
		}
	}
}

// oracle replays ops through Take on fresh keys: the results a store must
// give. Its ops name their key by slot, in Key.
type oracle struct {
	t       *testing.T
	st      limiter.Store
	slots   int
	history []limiter.Op // what was written, as ops on their own
}

// replay runs the history and then ops on fresh keys in one Take, and
// returns ops' results and the keys.
func (o *oracle) replay(ops []limiter.Op) ([]limiter.Result, []string) {
	fresh := atomicKeys(o.t, o.slots)
	in := make([]limiter.Op, 0, len(o.history)+len(ops))
	for _, op := range slices.Concat(o.history, ops) {
		op.Key, op.Joined = fresh[slotOf(op.Key)], false
		in = append(in, op)
	}
	res := take(o.t, o.st, in, max(len(in), 1))
	return res[len(o.history):], fresh
}

// testJointsMatchTake sends random calls of joints and ops on their own
// (refunds and peeks among them; with atomic, in TakeAll with random
// vetoes) and checks each result against the oracle: a joint's ops answer
// as Take answers them alone, and are written only if all are allowed;
// an all-or-nothing call commits as Rejects says. With debit, half the
// limits are charged always (limiter.Op.Debit): their charges are written
// all the same, as alone, from a denied joint or a rejected call. Then
// every key's expiry.
func testJointsMatchTake(t *testing.T, st limiter.Store, atomic bool, seed [2]uint64, debit bool) {
	rng := rand.New(rand.NewPCG(seed[0], seed[1]))
	const slots, calls = 6, 150
	windows := []int64{second, minute, hour}
	costs := []int64{0, 500, 1000, 1000, 1000, 1500, 3000}
	tmpl := randomTemplates(rng, slots, windows)
	for i := range tmpl {
		tmpl[i].Debit = debit && rng.IntN(2) == 0
	}
	keys := atomicKeys(t, slots)
	o := &oracle{t: t, st: st, slots: slots}
	var stats struct{ written, undone, commits, rejects int }
	now := base + rng.Int64N(hour)
	for c := range calls {
		if rng.IntN(3) == 0 {
			now += rng.Int64N(2 * minute)
		}
		var call []limiter.Op
		var units [][2]int // [from, to) in call
		for range 1 + rng.IntN(3) {
			n, cost, refund := 1, costs[rng.IntN(len(costs))], rng.IntN(6) == 0
			if rng.IntN(3) > 0 {
				n = 2 + rng.IntN(2)
			}
			veto := []limiter.Veto{limiter.VetoAlone, limiter.VetoAlone, limiter.VetoNone, limiter.VetoGroup}[rng.IntN(4)]
			if refund {
				veto = limiter.VetoNone
			}
			from := len(call)
			for j, s := range rng.Perm(slots)[:n] {
				op := tmpl[s]
				op.Key, op.Now, op.Cost, op.Refund, op.Joined = strconv.Itoa(s), now, cost, refund, j > 0
				if atomic {
					op.Veto = veto
				}
				call = append(call, op)
			}
			units = append(units, [2]int{from, len(call)})
		}
		// What each unit answers after the units before it that wrote.
		want := make([]limiter.Result, len(call))
		var wrote []limiter.Op
		for _, u := range units {
			res, _ := o.replay(slices.Concat(wrote, call[u[0]:u[1]]))
			copy(want[u[0]:u[1]], res[len(wrote):])
			if u[1]-u[0] > 1 && slices.ContainsFunc(want[u[0]:u[1]], func(r limiter.Result) bool { return !r.Allowed }) {
				stats.undone++
				wrote = append(wrote, debitCharges(call[u[0]:u[1]])...)
				continue
			}
			stats.written++
			wrote = append(wrote, call[u[0]:u[1]]...)
		}
		real := slices.Clone(call)
		for i := range real {
			real[i].Key = keys[slotOf(call[i].Key)]
		}
		got := make([]limiter.Result, len(real))
		var err error
		if atomic {
			err = st.(limiter.AtomicStore).TakeAll(context.Background(), real, got)
		} else {
			err = st.Take(context.Background(), real, got)
		}
		if err != nil {
			t.Fatalf("call %d: %v", c, err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("call %d op %d (%s, slot %s, cost %d, refund %v, joined %v, veto %d, debit %v): %s, want %s", c, i,
					call[i].Algorithm, call[i].Key, call[i].Cost, call[i].Refund, call[i].Joined, call[i].Veto, call[i].Debit, fmtResult(got[i]), fmtResult(want[i]))
			}
		}
		if atomic && limiter.Rejects(call, want) {
			stats.rejects++
			o.history = append(o.history, debitCharges(call)...)
			continue
		}
		stats.commits++
		o.history = append(o.history, wrote...)
	}
	if stats.written < calls/4 || stats.undone < calls/4 || atomic && (stats.commits < calls/5 || stats.rejects < calls/5) {
		t.Errorf("%+v: the test needs more of each", stats)
	}

	_, fresh := o.replay(nil)
	sameKeys(t, st, keys, fresh, tmpl, now)
}

// debitCharges returns the charges of ops that are charged even when
// denied (limiter.Op.Debit; not their peeks, nor their refunds, which
// land only with their call).
func debitCharges(ops []limiter.Op) []limiter.Op {
	var out []limiter.Op
	for _, op := range ops {
		if op.Debit && op.Cost > 0 && !op.Refund {
			out = append(out, op)
		}
	}
	return out
}

// randomTemplates returns n ops of random algorithms, windows and small
// limits, for random calls.
func randomTemplates(rng *rand.Rand, n int, windows []int64) []limiter.Op {
	tmpl := make([]limiter.Op, n)
	for i := range tmpl {
		w := windows[rng.IntN(len(windows))]
		requests := 1 + rng.Int64N(4)
		switch alg := descriptors.Algorithm(rng.IntN(3)); alg {
		case descriptors.TokenBucket:
			tmpl[i] = tokenOp(requests, w, 1+rng.Int64N(2*requests))
		default:
			tmpl[i] = limiter.Op{Algorithm: alg, Limit: requests*milli + 500*rng.Int64N(2), Window: w}
		}
	}
	return tmpl
}

// sameKeys checks, if st is an Inspector, that the keys of each slot (of
// template tmpl[s]) live after now as long as the oracle's fresh ones.
func sameKeys(t *testing.T, st limiter.Store, keys, fresh []string, tmpl []limiter.Op, now int64) {
	t.Helper()
	in, ok := st.(Inspector)
	if !ok {
		return
	}
	for s := range keys {
		got, err := in.Expiries(context.Background(), keys[s], now)
		if err != nil {
			t.Fatal(err)
		}
		want, err := in.Expiries(context.Background(), fresh[s], now)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := trimKeys(got, keys[s]), trimKeys(want, fresh[s]); fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("slot %d (%s): left %v, Take's %v", s, tmpl[s].Algorithm, g, w)
		}
	}
}
