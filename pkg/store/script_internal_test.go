package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestDecodeTake: replies map back to ops (one integer an op, a denied
// sliding window's two); an op left undecided (-1) is
// reported as moved in a call with spread keys and is a mismatch in one
// that declared its keys; a reply of another call or of another shape is
// a mismatch.
func TestDecodeTake(t *testing.T) {
	const tag, secs, usec = 7, 1000, 500_999 // Redis TIME 1,000,500 ms
	ops := []limiter.Op{
		{Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 1000, Cost: 1000},
		{Algorithm: descriptors.SlidingWindow, Limit: 5000, Window: 1000, Cost: 1000},
		{Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 1000, Cost: 1000},
	}
	for _, tc := range []struct {
		name      string
		reply     []int64
		spread    bool
		wantErr   bool
		wantMoved []int
	}{
		{"all decided", []int64{tag, secs, usec, 2000, 1000, 2000}, false, false, nil},
		{"sliding denied, then its retry", []int64{tag, secs, usec, 2000, 4500, 300, 2000}, false, false, nil},
		{"undecided, spread keys", []int64{tag, secs, usec, -1, -1, 2000}, true, false, []int{0, 1}},
		{"undecided, declared keys", []int64{tag, secs, usec, 2000, -1, 2000}, false, true, nil},
		{"another call's tag", []int64{tag + 1, secs, usec, 2000, 1000, 2000}, true, true, nil},
		{"too short", []int64{tag, secs, usec, 2000, 1000}, true, true, nil},
		{"too long", []int64{tag, secs, usec, 2000, 1000, 2000, 9}, true, true, nil},
		{"denied sliding without its retry", []int64{tag, secs, usec, 2000, 4500, 2000}, true, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := make([]limiter.Result, len(ops))
			var moved []int
			var into *[]int
			if tc.spread {
				into = &moved
			}
			err := decodeTake(tc.reply, tag, ops, results, into)
			if tc.wantErr {
				if !errors.Is(err, ErrReplyMismatch) {
					t.Fatalf("err = %v, want ErrReplyMismatch", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(moved, tc.wantMoved) {
				t.Errorf("moved %v, want %v", moved, tc.wantMoved)
			}
			if !slices.Contains(moved, 2) {
				// The last fixed window holds 2000 of 5000 at 500 ms into its window.
				if want := (limiter.Result{Allowed: true, Remaining: 3000, Reset: 500}); results[2] != want {
					t.Errorf("op 2 = %+v, want %+v", results[2], want)
				}
			}
		})
	}
}

// TestLeanCalls: fixed.lua takes the calls of fixed-window charges of one
// window, cost and time, on keys a call may declare and not repeated much;
// take.lua every other call.
func TestLeanCalls(t *testing.T) {
	fw := limiter.Op{Key: "a{1}:", Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 60_000, Cost: 1000}
	with := func(op limiter.Op, f func(*limiter.Op)) limiter.Op { f(&op); return op }
	other := with(fw, func(o *limiter.Op) { o.Key = "b{2}:"; o.Limit = 7000 })
	many := make([]limiter.Op, 2+leanRepeats)
	for i := range many {
		many[i] = fw
	}
	for _, tc := range []struct {
		name   string
		ops    []limiter.Op
		spread bool
		want   *script
	}{
		{"one charge", []limiter.Op{fw}, false, fixedScript},
		{"at an explicit time", []limiter.Op{with(fw, func(o *limiter.Op) { o.Now = 123_456 })}, false, fixedScript},
		{"two keys, two limits", []limiter.Op{fw, other}, false, fixedScript},
		{"a key repeated", []limiter.Op{fw, fw, other}, false, fixedScript},
		{"a key repeated too often", many, false, takeScript},
		{"two costs", []limiter.Op{fw, with(other, func(o *limiter.Op) { o.Cost = 2000 })}, false, takeScript},
		{"two windows", []limiter.Op{fw, with(other, func(o *limiter.Op) { o.Window = 1000 })}, false, takeScript},
		{"two times", []limiter.Op{fw, with(other, func(o *limiter.Op) { o.Now = 1 })}, false, takeScript},
		{"a peek", []limiter.Op{with(fw, func(o *limiter.Op) { o.Cost = 0 })}, false, takeScript},
		{"a refund", []limiter.Op{with(fw, func(o *limiter.Op) { o.Refund = true })}, false, takeScript},
		{"a sliding window", []limiter.Op{with(fw, func(o *limiter.Op) { o.Algorithm = descriptors.SlidingWindow })}, false, takeScript},
		{"cross-slot mode, one op", []limiter.Op{fw}, true, fixedScript},
		{"cross-slot mode, two", []limiter.Op{fw, other}, true, takeCrossScript},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var enc takeEncoder
			s := takeScript
			if tc.spread {
				s = takeCrossScript
			}
			enc.plan(tc.ops, s)
			if enc.script != tc.want {
				t.Errorf("call to %s, want %s", enc.script.name, tc.want.name)
			}
		})
	}
}

// TestDecodeFixed: fixed.lua's replies, the string of a call of one op
// and the integers of a longer one, map back to ops; a reply of another
// call or shape is a mismatch.
func TestDecodeFixed(t *testing.T) {
	const tag = 7
	fw := limiter.Op{Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 1000, Cost: 1000}
	var one [4]int64
	v, err := parseFixedOne("7 1000 500999 2000", &one)
	if err != nil {
		t.Fatal(err)
	}
	res := make([]limiter.Result, 2)
	if err := decodeFixed(v, tag, []limiter.Op{fw}, res); err != nil {
		t.Fatal(err)
	}
	if want := (limiter.Result{Allowed: true, Remaining: 3000, Reset: 500}); res[0] != want {
		t.Errorf("one op = %+v, want %+v", res[0], want)
	}
	if err := decodeFixed([]int64{tag, 1000, 500_999, 2000, 6000}, tag, []limiter.Op{fw, fw}, res); err != nil {
		t.Fatal(err)
	}
	if want := (limiter.Result{RetryAfter: 500, Reset: 500}); res[1] != want {
		t.Errorf("second op = %+v, want %+v", res[1], want)
	}
	for _, bad := range []string{"7 1000 500999", "7 1000 500999 2000 1", "x 1000 500999 2000", "7 1000 500999 2e3", ""} {
		if _, err := parseFixedOne(bad, &one); !errors.Is(err, ErrReplyMismatch) {
			t.Errorf("%q: err = %v, want ErrReplyMismatch", bad, err)
		}
	}
	for _, bad := range [][]int64{{tag + 1, 1000, 0, 2000}, {tag, 1000, 0}, {tag, 1000, 0, 2000, 3000}, {tag, 0, 0, 2000}} {
		if err := decodeFixed(bad, tag, []limiter.Op{fw}, res); !errors.Is(err, ErrReplyMismatch) {
			t.Errorf("%v: err = %v, want ErrReplyMismatch", bad, err)
		}
	}
}

// TestDecodeTakeDerived: the answers take.lua's compact replies stand for,
// derived as memory.go derives them: a fixed window op after one of its
// set on its key has no value of its own; a bucket's value is
// t * den + c, negated less 2 when denied; a sliding window's is the
// weighted count.
func TestDecodeTakeDerived(t *testing.T) {
	const tag, secs, usec = 7, 1000, 500_999 // Redis TIME 1,000,500 ms
	fixed := limiter.Op{Key: "a", Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 1000, Cost: 2000}
	bucket := limiter.Op{Key: "b", Algorithm: descriptors.TokenBucket, Burst: 10_000, RateNum: 1, RateDen: 6, Window: 60_000, Cost: 1000}
	sliding := limiter.Op{Key: "s", Algorithm: descriptors.SlidingWindow, Limit: 5000, Window: 1000, Cost: 1000}
	debitBucket := bucket
	debitBucket.Debit = true
	peek := fixed
	peek.Cost = 0
	other := fixed
	other.Key = "c"
	for _, tc := range []struct {
		name  string
		ops   []limiter.Op
		reply []int64
		want  []limiter.Result
	}{{
		name:  "fixed ops of one set on one key: the first's count, then its cost each",
		ops:   []limiter.Op{fixed, fixed, fixed, other},
		reply: []int64{tag, secs, usec, 3000, 1000},
		want: []limiter.Result{
			{Allowed: true, Remaining: 2000, Reset: 500},
			{Allowed: true, Remaining: 0, Reset: 500},
			{RetryAfter: 500, Reset: 500},
			{Allowed: true, Remaining: 4000, Reset: 500},
		},
	}, {
		name:  "a peek has its own set",
		ops:   []limiter.Op{fixed, peek, peek},
		reply: []int64{tag, secs, usec, 3000, 3000},
		want: []limiter.Result{
			{Allowed: true, Remaining: 2000, Reset: 500},
			{Allowed: true, Remaining: 2000, Reset: 500},
			{Allowed: true, Remaining: 2000, Reset: 500},
		},
	}, {
		name: "bucket allowed and denied",
		ops:  []limiter.Op{bucket, bucket},
		// 166 milli-tokens, carry 4: 166*6+4 = 1000; denied: -1000-2.
		reply: []int64{tag, 0, 0, 9000 * 6, -1002},
		want: []limiter.Result{
			{Allowed: true, Remaining: 9000, Reset: 6000},
			{Remaining: 166, RetryAfter: 5000, Reset: 59000},
		},
	}, {
		name: "a debit bucket's t comes shifted by burst",
		ops:  []limiter.Op{debitBucket, debitBucket},
		// t 2000: (2000+10000)*6; denied at t -3000: -(7000*6)-2.
		reply: []int64{tag, 0, 0, 12000 * 6, -42002},
		want: []limiter.Result{
			{Allowed: true, Remaining: 2000, Reset: 48000},
			{RetryAfter: 24000, Reset: 78000},
		},
	}, {
		name:  "sliding allowed and denied",
		ops:   []limiter.Op{sliding, sliding},
		reply: []int64{tag, secs, usec, 3000, 4001, 250},
		want: []limiter.Result{
			{Allowed: true, Remaining: 1000, Reset: 500},
			{Remaining: 999, RetryAfter: 250, Reset: 500},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]limiter.Result, len(tc.ops))
			if err := decodeTake(tc.reply, tag, tc.ops, got, nil); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("op %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestWindowGuessWrong: the window a fixed window's key carries is only
// the store's guess; when it is not Redis' (a clock off by two days
// here), take.lua counts in Redis' window all the same, for a lone op and
// for a group, and writes nothing at the guessed key. (Windows of a day:
// should Redis' day turn during the test, it checks nothing.)
func TestWindowGuessWrong(t *testing.T) {
	addr := redistest.Addr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	r := NewRedis(redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}), nil, RedisOptions{CloseClient: true})
	defer r.Close()
	ctx := context.Background()
	const day = 86_400_000
	for _, off := range []int64{0, -2 * day} {
		guessClock = func() int64 { return time.Now().UnixMilli() + off }
		base := fmt.Sprintf("guess:%d:{k}:", time.Now().UnixNano())
		t.Cleanup(func() { rdb.Del(ctx, base+"tokens") })
		fw := limiter.Op{Key: base, Algorithm: descriptors.FixedWindow, Limit: 10_000, Window: day, Cost: 1000}
		before, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		tb := limiter.Op{Key: base, Algorithm: descriptors.TokenBucket, Burst: 10_000, RateNum: 1, RateDen: 6, Window: 60_000, Cost: 1000}
		// fixed.lua decides {fw} and {a, b}, take.lua {fw, fw, tb}.
		a, b := fw, fw
		a.Key, b.Key = base+"a:", base+"b:"
		var results [][]limiter.Result
		for _, ops := range [][]limiter.Op{{fw}, {fw, fw, tb}, {a, b}} {
			res := make([]limiter.Result, len(ops))
			if err := r.Take(ctx, ops, res); err != nil {
				t.Fatal(err)
			}
			results = append(results, res)
		}
		after, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		window := before.Unix() - before.Unix()%(day/1000)
		if after.Unix()-after.Unix()%(day/1000) != window {
			t.Logf("Redis' day turned during the test: nothing checked")
			continue
		}
		for i, want := range []int64{9000, 8000, 7000} {
			got := results[min(i, 1)][max(i-1, 0)]
			if !got.Allowed || got.Remaining != want {
				t.Errorf("off %d ms: fixed window op %d = %+v, want remaining %d", off, i, got, want)
			}
		}
		if got := results[1][2]; !got.Allowed || got.Remaining != 9000 {
			t.Errorf("off %d ms: bucket = %+v, want remaining 9000", off, got)
		}
		for i, got := range results[2] {
			if !got.Allowed || got.Remaining != 9000 {
				t.Errorf("off %d ms: fixed window op %d of two keys = %+v, want remaining 9000", off, i, got)
			}
		}
		keys, err := rdb.Keys(ctx, base+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		start := strconv.FormatInt(window, 10)
		if want := []string{base + start, base + "a:" + start, base + "b:" + start, base + "tokens"}; !slices.Equal(keys, want) {
			t.Errorf("off %d ms: keys %q, want %q", off, keys, want)
		}
		// Each counter ends with Redis' window, whichever script made it.
		for _, k := range []string{base + start, base + "a:" + start, base + "b:" + start} {
			if at, err := rdb.PExpireTime(ctx, k).Result(); err != nil || at != time.Duration(window*1000+day)*time.Millisecond {
				t.Errorf("off %d ms: %s expires at %v (%v), want the window's end, %d ms", off, k, at, err, window*1000+day)
			}
		}
		rdb.Del(ctx, keys...)
	}
	guessClock = func() int64 { return time.Now().UnixMilli() }
}

// TestCalendarGuessWrong: a calendar's window (limiter.Op.Calendar) at
// Redis TIME is Redis' period, whatever period the store's clock guessed
// (a day off either way here), in take.lua (alone, in a group, a sliding
// window) and atomic.lua: the keys carry Redis' day.
func TestCalendarGuessWrong(t *testing.T) {
	addr := redistest.Addr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	r := NewRedis(redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}), nil, RedisOptions{CloseClient: true})
	defer r.Close()
	ctx := context.Background()
	const day = 86_400_000
	utc, err := descriptors.NewCalendar("UTC", descriptors.Day, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { guessClock = func() int64 { return time.Now().UnixMilli() } }()
	for _, off := range []int64{0, -day, day} {
		guessClock = func() int64 { return time.Now().UnixMilli() + off }
		base := fmt.Sprintf("guesscal:%d:{k}:", time.Now().UnixNano())
		fw := limiter.Op{Key: base + "f:", Algorithm: descriptors.FixedWindow, Limit: 10_000, Window: day, Cost: 1000, Calendar: utc}
		sw := fw
		sw.Key, sw.Algorithm = base+"s:", descriptors.SlidingWindow
		all := fw
		all.Key = base + "a:"
		before, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		var got []limiter.Result
		for _, ops := range [][]limiter.Op{{fw}, {fw, fw}, {sw}} {
			res := make([]limiter.Result, len(ops))
			if err := r.Take(ctx, ops, res); err != nil {
				t.Fatal(err)
			}
			got = append(got, res...)
		}
		res := make([]limiter.Result, 1)
		if err := r.TakeAll(ctx, []limiter.Op{all}, res); err != nil {
			t.Fatal(err)
		}
		got = append(got, res...)
		after, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		start := before.Unix() - before.Unix()%(day/1000)
		if after.Unix()-after.Unix()%(day/1000) != start {
			t.Logf("Redis' day turned during the test: nothing checked")
			continue
		}
		for i, want := range []int64{9000, 8000, 7000, 9000, 9000} {
			if !got[i].Allowed || got[i].Remaining != want || got[i].Reset <= 0 || got[i].Reset > day {
				t.Errorf("off %d ms: op %d = %+v, want remaining %d and a reset within the day", off, i, got[i], want)
			}
		}
		keys, err := rdb.Keys(ctx, base+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		s := strconv.FormatInt(start, 10)
		if want := []string{base + "a:" + s, base + "f:" + s, base + "s:" + s}; !slices.Equal(keys, want) {
			t.Errorf("off %d ms: keys %q, want %q", off, keys, want)
		}
		rdb.Del(ctx, keys...)
	}
}
