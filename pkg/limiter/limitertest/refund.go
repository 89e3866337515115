package limitertest

import (
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// refundTables are refunds (limiter.Op.Refund, Envoy's is_negative_hits)
// on each algorithm, 10 requests a minute: 10 charged, 4 given back,
// remaining up by 4; a refund never takes remaining past the limit (or a
// bucket past its burst), and one on state that is not there writes none.
// A counter a refund empties is deleted, as is a bucket it fills; one it
// does not keeps its expiry.
func refundTables() []table {
	fixed := limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 10 * milli, Window: minute}
	sliding := limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 10 * milli, Window: minute}
	bucket := tokenOp(10, minute, 10)
	refund := func(at, cost int64, want limiter.Result) step { return step{at, -cost, want} }
	var out []table
	for _, w := range []struct {
		name string
		op   limiter.Op
		key  string // the suffix of its state's key
		exp  int64  // that key's expiry
	}{
		{"FixedWindow", fixed, windowSuffix(0), minute},
		{"SlidingWindow", sliding, windowSuffix(0), 2 * minute},
	} {
		out = append(out, table{
			name: w.name + "ChargeTenRefundFour",
			op:   w.op,
			steps: []step{
				{0, 10 * milli, allow(0, minute)},
				refund(0, 4*milli, allow(4*milli, minute)),
				{1000, 0, allow(4*milli, minute-1000)},
			},
			expiries: map[string]int64{w.key: w.exp},
		}, table{
			name: w.name + "RefundNeverPastTheLimit",
			op:   w.op,
			steps: []step{
				{0, 6 * milli, allow(4*milli, minute)},
				refund(0, 100*milli, allow(10*milli, minute)), // emptied: deleted
				{0, 0, allow(10*milli, minute)},
				refund(1000, 4*milli, allow(10*milli, minute-1000)), // nothing to give back
			},
			expiries: map[string]int64{},
		}, table{
			name: w.name + "RefundToExactlyZero",
			op:   w.op,
			steps: []step{
				{0, 4 * milli, allow(6*milli, minute)},
				refund(500, 4*milli, allow(10*milli, minute-500)), // emptied exactly: deleted
				{1000, 0, allow(10*milli, minute-1000)},
			},
			expiries: map[string]int64{},
		})
	}
	// Bucket: burst 10000, 1/6 milli-token per ms; fill(t) = (10000-t)*6.
	out = append(out, table{
		name: "TokenBucketChargeTenRefundFour",
		op:   bucket,
		steps: []step{
			{0, 10 * milli, allow(0, minute)},
			refund(0, 4*milli, allow(4*milli, 36000)),
			{0, 0, allow(4*milli, 36000)},
		},
		expiries: map[string]int64{"tokens": 36000},
	}, table{
		name: "TokenBucketRefundNeverPastTheBurst",
		op:   bucket,
		steps: []step{
			{0, 6 * milli, allow(4*milli, 36000)},
			// 600 ms later: 100 milli-tokens back; then 100 requests given
			// back: full, the state deleted.
			refund(600, 100*milli, allow(10*milli, 0)),
			{600, 0, allow(10*milli, 0)},
			refund(700, 4*milli, allow(10*milli, 0)), // a full bucket stays full
		},
		expiries: map[string]int64{},
	})
	return out
}

// testAllOrNothingRefunds: a refund (VetoNone, as the limiter sends it) in an
// all-or-nothing call answers as Take would, and gives back only if the
// call commits; on each algorithm, 10 an hour, 5 charged, 2 given back.
func testAllOrNothingRefunds(t *testing.T, st limiter.AllOrNothingStore) {
	for _, op := range algorithmOps(10, 17*minute) {
		name := op.Algorithm.String()
		keys := taggedKeys(t, 3)
		mirror, probe := newKey(t), newKey(t) // Take's: the calls that commit; the refund alone
		charge, give := op, op
		charge.Cost = 5 * milli
		give.Cost, give.Refund, give.Veto = 2*milli, true, limiter.VetoNone
		over := withKey(op, keys[1])
		over.Limit, over.Burst = 0, milli/2 // never allowed
		take(t, st, []limiter.Op{withKey(charge, keys[0]), withKey(charge, mirror), withKey(charge, probe)}, 3)
		want := take(t, st, []limiter.Op{withKey(give, probe)}, 1)[0]
		peek := func(key string) limiter.Result {
			return take(t, st, peeks([]limiter.Op{withKey(op, key)}), 1)[0]
		}

		got := takeAll(t, st, []limiter.Op{withKey(give, keys[0]), over})
		if got[0] != want || got[1].Allowed {
			t.Errorf("%s: a refund beside a denial = %s %s, want %s and a denial", name, fmtResult(got[0]), fmtResult(got[1]), fmtResult(want))
		}
		if a, b := peek(keys[0]), peek(mirror); a != b {
			t.Errorf("%s: after the rejected call, %s, want %s: as if it never ran", name, fmtResult(a), fmtResult(b))
		}

		got = takeAll(t, st, []limiter.Op{withKey(give, keys[0]), withKey(op, keys[2])})
		take(t, st, []limiter.Op{withKey(give, mirror)}, 1)
		if got[0] != want || !got[1].Allowed {
			t.Errorf("%s: a refund beside an allowed op = %s %s, want %s", name, fmtResult(got[0]), fmtResult(got[1]), fmtResult(want))
		}
		if a, b := peek(keys[0]), peek(mirror); a != b {
			t.Errorf("%s: after the committed refund, %s, want Take's %s", name, fmtResult(a), fmtResult(b))
		}
	}
}
