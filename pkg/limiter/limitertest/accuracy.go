package limitertest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// batch is how many time-stepped ops the accuracy tests send per Take.
const batch = 5000

// testAccuracy covers the rates a seed library got wrong: slow refills,
// refills smaller than a request per poll, and short sliding windows.
func testAccuracy(t *testing.T, newStore func(*testing.T) limiter.Store) {
	t.Run("OnePerHourRefill", func(t *testing.T) {
		// Polled every 10 minutes for 10 hours after draining: one request
		// every hour, on the hour.
		testRefill(t, newStore(t), tokenOp(1, hour, 1), 1, 10*minute, 10*hour, 1000)
	})
	t.Run("TenPerDayRefill", func(t *testing.T) {
		// Polled every 15 minutes for a day: one request per 2.4 hours, at
		// the first poll after each 2.4 hours.
		testRefill(t, newStore(t), tokenOp(10, day, 10), 10, 15*minute, day, 1000)
	})
	t.Run("HundredPerMinuteCarry", func(t *testing.T) {
		// Polled every ms: 5/3 milli-tokens a poll. Rounding each refill
		// down would admit 60 a minute; carrying the remainder admits 100,
		// every 600 ms.
		testRefill(t, newStore(t), tokenOp(100, minute, 100), 100, 1, minute, 1000)
	})
	t.Run("SlidingOneSecond", func(t *testing.T) {
		testSlidingOneSecond(t, newStore(t))
	})
}

// testRefill drains a full bucket of burst requests at base, polls it every
// step ms until until with cost, and checks that the j-th poll admitted is
// the first at or after the refill of j costs: p*num >= j*cost*den.
func testRefill(t *testing.T, st limiter.Store, op limiter.Op, burst, step, until, cost int64) {
	op.Key = newKey(t)
	at := func(now, cost int64) limiter.Op {
		o := op
		o.Now, o.Cost = base+now, cost
		return o
	}
	var in []limiter.Op
	for range burst {
		in = append(in, at(0, 1000))
	}
	var want []int64
	for p := step; p <= until; p += step {
		in = append(in, at(p, cost))
		if p*op.RateNum >= (int64(len(want))+1)*cost*op.RateDen {
			want = append(want, p)
		}
	}
	res := take(t, st, in, batch)
	for i := range burst {
		if !res[i].Allowed {
			t.Fatalf("drain op %d denied", i)
		}
	}
	var got []int64
	for i, r := range res[burst:] {
		if r.Allowed {
			got = append(got, in[int(burst)+i].Now-base)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("admitted %d at %v\nwant %d at %v", len(got), abbrev(got), len(want), abbrev(want))
	}
}

// testSlidingOneSecond checks that a 5-per-second sliding window enforces
// its rate against a client that polls every 10 ms.
//
// Second 0: the first 5 of 20 ops at 0..19 ms pass. Second 1: prev = 5000,
// share = 5*rem (rem = 999 - elapsed); with cur = 1000k an op passes once
// 1000k + 5*rem + 1000 <= 5000, i.e. at elapsed 199, 399, 599, 799 (polled
// at 200, 400, 600, 800); the fifth would need rem = 0, elapsed 999, which
// the 10 ms polls miss. Every later second: prev = 4000, share = 4*rem,
// passes at elapsed 0, 249, 499, 749 (polled at 0, 250, 500, 750). No
// second ever admits more than 5.
func testSlidingOneSecond(t *testing.T, st limiter.Store) {
	op := limiter.Op{Algorithm: descriptors.SlidingWindow, Limit: 5 * milli, Window: second, Key: newKey(t), Cost: 1000}
	var in []limiter.Op
	for at := int64(0); at < 20; at++ {
		op.Now = base + at
		in = append(in, op)
	}
	for at := int64(20); at < 10*second; at += 10 {
		op.Now = base + at
		in = append(in, op)
	}
	want := []int64{0, 1, 2, 3, 4, 1200, 1400, 1600, 1800}
	for s := int64(2); s < 10; s++ {
		want = append(want, s*1000, s*1000+250, s*1000+500, s*1000+750)
	}
	res := take(t, st, in, batch)
	var got []int64
	for i, r := range res {
		if r.Allowed {
			got = append(got, in[i].Now-base)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("admitted %d at %v\nwant %d at %v", len(got), abbrev(got), len(want), abbrev(want))
	}
}

// testLongRunRate offers twice the limit, 1000 ops of 1/500 of it a window,
// for 12 windows: the last 10 (after warm-up) admit the rate within 1%.
func testLongRunRate(t *testing.T, newStore func(*testing.T) limiter.Store) {
	rates := []struct {
		name             string
		requests, window int64
	}{
		{"1PerDay", 1, day},
		{"1PerHour", 1, hour},
		{"100PerMinute", 100, minute},
		{"1000PerSecond", 1000, second},
		{"100000PerSecond", 100000, second},
	}
	const warm, measured = 2, 10
	for _, alg := range []descriptors.Algorithm{descriptors.FixedWindow, descriptors.SlidingWindow, descriptors.TokenBucket} {
		for _, rate := range rates {
			t.Run(fmt.Sprintf("%s/%s", alg, rate.name), func(t *testing.T) {
				st := newStore(t)
				w := rate.window
				op := limiter.Op{Algorithm: alg, Limit: rate.requests * milli, Window: w}
				if alg == descriptors.TokenBucket {
					op = tokenOp(rate.requests, w, rate.requests)
				}
				op.Key, op.Cost = newKey(t), op.Limit/500
				step := w / 1000
				var in []limiter.Op
				for at := w/3 + 7; at < (warm+measured)*w; at += step {
					op.Now = base + at
					in = append(in, op)
				}
				res := take(t, st, in, batch)
				var admitted int64
				for i, r := range res {
					if r.Allowed && in[i].Now >= base+warm*w {
						admitted += in[i].Cost
					}
				}
				want := measured * op.Limit
				if diff := admitted - want; diff*100 > want || -diff*100 > want {
					t.Errorf("admitted %d milli-requests in %d windows, want %d +- 1%%", admitted, measured, want)
				}
				t.Logf("%d ops, admitted %.3f%% of the rate", len(in), 100*float64(admitted)/float64(want))
			})
		}
	}
}

// abbrev shortens a long list of times for an error message.
func abbrev(v []int64) string {
	if len(v) <= 24 {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%v ... %v", v[:12], v[len(v)-12:])
}
