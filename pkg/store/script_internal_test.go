package store

import (
	"errors"
	"slices"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// TestDecodeTake: replies map back to ops; an op left undecided (-1) is
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
		{"all decided", []int64{tag, clock, 2000, 1, 3000, 0, 500, 2000}, false, false, nil},
		{"undecided, spread keys", []int64{tag, clock, -1, -1, 0, 0, 0, 2000}, true, false, []int{0, 1}},
		{"undecided, declared keys", []int64{tag, clock, 2000, -1, 0, 0, 0, 2000}, false, true, nil},
		{"another call's tag", []int64{tag + 1, clock, 2000, 1, 3000, 0, 500, 2000}, true, true, nil},
		{"too short", []int64{tag, clock, 2000, 1, 3000}, true, true, nil},
		{"too long", []int64{tag, clock, 2000, 1, 3000, 0, 500, 2000, 9}, true, true, nil},
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
