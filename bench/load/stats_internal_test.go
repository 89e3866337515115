package load

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueOnce(t *testing.T) {
	prevHigh := int64(-1)
	for i := range nBuckets {
		high := bucketHigh(i)
		if high <= prevHigh {
			t.Fatalf("bucket %d ends at %d, not after bucket %d (%d)", i, high, i-1, prevHigh)
		}
		low := prevHigh + 1
		for _, v := range []int64{low, high, (low + high) / 2} {
			if got := bucketOf(v); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d (bucket %d holds [%d, %d])", v, got, i, i, low, high)
			}
		}
		if low >= subCount && float64(high-low+1) > float64(low)/64+1 {
			t.Fatalf("bucket %d [%d, %d] is wider than 1/64 of its values", i, low, high)
		}
		prevHigh = high
	}
	if prevHigh != maxTracked {
		t.Fatalf("last bucket ends at %d, want %d", prevHigh, maxTracked)
	}
}

func TestQuantilesWithinBucketPrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := &histogram{}
	var vals []int64
	for range 100000 {
		// Log-uniform from 10 µs to 100 ms.
		v := int64(10e3 * math.Pow(10, rng.Float64()*4))
		vals = append(vals, v)
		h.record(time.Duration(v))
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := vals[int(q*float64(len(vals))+0.999999)-1]
		got := int64(h.quantile(q))
		if got < exact || float64(got-exact) > float64(exact)/64 {
			t.Errorf("q%.3f = %d, exact %d: off by more than one bucket", q, got, exact)
		}
	}
	if got := int64(h.quantile(1)); got != vals[len(vals)-1] {
		t.Errorf("max quantile %d, want the exact max %d", got, vals[len(vals)-1])
	}
}

func TestHistogramClampsAndMerges(t *testing.T) {
	a, b := &histogram{}, &histogram{}
	a.record(time.Hour)
	b.record(time.Millisecond)
	b.record(-time.Second) // clock steps are clamped to 0
	a.merge(b)
	if a.n != 3 || a.max != int64(time.Hour) {
		t.Fatalf("merged n=%d max=%v", a.n, time.Duration(a.max))
	}
	if got := a.quantile(1); got != time.Hour {
		t.Fatalf("p100 = %v, want 1h (the exact max)", got)
	}
	if got := a.quantile(0.5); got < time.Millisecond || got > time.Millisecond*65/64 {
		t.Fatalf("p50 = %v, want about 1ms", got)
	}
}
