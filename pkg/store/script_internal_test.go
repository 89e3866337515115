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
	const tag, clock = 7, 1_000_500
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
		{"all decided", []int64{tag, clock, 2000, 1000, 2000}, false, false, nil},
		{"sliding denied, then its retry", []int64{tag, clock, 2000, 4500, 300, 2000}, false, false, nil},
		{"undecided, spread keys", []int64{tag, clock, -1, -1, 2000}, true, false, []int{0, 1}},
		{"undecided, declared keys", []int64{tag, clock, 2000, -1, 2000}, false, true, nil},
		{"another call's tag", []int64{tag + 1, clock, 2000, 1000, 2000}, true, true, nil},
		{"too short", []int64{tag, clock, 2000, 1000}, true, true, nil},
		{"too long", []int64{tag, clock, 2000, 1000, 2000, 9}, true, true, nil},
		{"denied sliding without its retry", []int64{tag, clock, 2000, 4500, 2000}, true, true, nil},
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

// TestDecodeTakeDerived: the answers take.lua's compact replies stand for,
// derived as memory.go derives them: a fixed window op after one of its
// set on its key has no value of its own; a bucket's value is
// t * den + c, negated less 2 when denied; a sliding window's is the
// weighted count.
func TestDecodeTakeDerived(t *testing.T) {
	const tag, clock = 7, 1_000_500
	fixed := limiter.Op{Key: "a", Algorithm: descriptors.FixedWindow, Limit: 5000, Window: 1000, Cost: 2000}
	bucket := limiter.Op{Key: "b", Algorithm: descriptors.TokenBucket, Burst: 10_000, RateNum: 1, RateDen: 6, Window: 60_000, Cost: 1000}
	sliding := limiter.Op{Key: "s", Algorithm: descriptors.SlidingWindow, Limit: 5000, Window: 1000, Cost: 1000}
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
		reply: []int64{tag, clock, 3000, 1000},
		want: []limiter.Result{
			{Allowed: true, Remaining: 2000, Reset: 500},
			{Allowed: true, Remaining: 0, Reset: 500},
			{RetryAfter: 500, Reset: 500},
			{Allowed: true, Remaining: 4000, Reset: 500},
		},
	}, {
		name:  "a peek has its own set",
		ops:   []limiter.Op{fixed, peek, peek},
		reply: []int64{tag, clock, 3000, 3000},
		want: []limiter.Result{
			{Allowed: true, Remaining: 2000, Reset: 500},
			{Allowed: true, Remaining: 2000, Reset: 500},
			{Allowed: true, Remaining: 2000, Reset: 500},
		},
	}, {
		name: "bucket allowed and denied",
		ops:  []limiter.Op{bucket, bucket},
		// 166 milli-tokens, carry 4: 166*6+4 = 1000; denied: -1000-2.
		reply: []int64{tag, 0, 9000 * 6, -1002},
		want: []limiter.Result{
			{Allowed: true, Remaining: 9000, Reset: 6000},
			{Remaining: 166, RetryAfter: 5000, Reset: 59000},
		},
	}, {
		name:  "sliding allowed and denied",
		ops:   []limiter.Op{sliding, sliding},
		reply: []int64{tag, clock, 3000, 4001, 250},
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
		var results [][]limiter.Result
		for _, ops := range [][]limiter.Op{{fw}, {fw, fw, tb}} {
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
		keys, err := rdb.Keys(ctx, base+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		if want := []string{base + strconv.FormatInt(window, 10), base + "tokens"}; !slices.Equal(keys, want) {
			t.Errorf("off %d ms: keys %q, want %q", off, keys, want)
		}
		rdb.Del(ctx, keys...)
	}
	guessClock = func() int64 { return time.Now().UnixMilli() }
}
