package quota_test

import (
	"math"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		rate, burst float64
		want        quota.TokenBucket
	}{
		{300, 300, quota.TokenBucket{MaxTokens: 300, TokensPerFill: 300, FillSeconds: 1}},
		{100, 100, quota.TokenBucket{MaxTokens: 100, TokensPerFill: 100, FillSeconds: 1}},
		{99.5, 99.5, quota.TokenBucket{MaxTokens: 100, TokensPerFill: 199, FillSeconds: 2}},
		{10, 60, quota.TokenBucket{MaxTokens: 60, TokensPerFill: 100, FillSeconds: 10}},
		{1.0 / 3, 1, quota.TokenBucket{MaxTokens: 1, TokensPerFill: 100, FillSeconds: 300}},
		{0.01, 0.2, quota.TokenBucket{MaxTokens: 1, TokensPerFill: 36, FillSeconds: 3600}},
		{1.0 / 86400, 1, quota.TokenBucket{MaxTokens: 1, TokensPerFill: 1, FillSeconds: 86400}},
		{1e12, 1e12, quota.TokenBucket{MaxTokens: math.MaxUint32, TokensPerFill: math.MaxUint32, FillSeconds: 1}},
	} {
		got, ok := quota.Encode(tc.rate, tc.burst)
		if !ok || got != tc.want {
			t.Errorf("Encode(%v, %v) = %+v, %v; want %+v", tc.rate, tc.burst, got, ok, tc.want)
		}
	}
	for _, r := range []float64{0, -1, math.NaN(), 1e-9, 1e-19} {
		if _, ok := quota.Encode(r, 10); ok {
			t.Errorf("Encode(%v) ok", r)
		}
	}
}

// FuzzEncode: the encoded rate never exceeds the rate, stays within 1% of
// it (or one token per interval, for very slow rates), the interval is at
// least a second, and two different intervals never share their nanos.
func FuzzEncode(f *testing.F) {
	f.Add(300.0, 12.5)
	f.Add(0.003, 1.0)
	f.Fuzz(func(t *testing.T, a, b float64) {
		if !(a > 1e-7 && a < 1e9 && b > 1e-7 && b < 1e9) {
			return
		}
		ta, _ := quota.Encode(a, 1)
		tb, _ := quota.Encode(b, 1)
		for _, x := range []struct {
			rate float64
			tb   quota.TokenBucket
		}{{a, ta}, {b, tb}} {
			got := x.tb.Rate()
			if x.tb.FillSeconds < 1 || x.tb.TokensPerFill < 1 {
				t.Fatalf("Encode(%v) = %+v", x.rate, x.tb)
			}
			if got > x.rate*(1+1e-9) {
				t.Fatalf("Encode(%v) refills at %v, faster", x.rate, got)
			}
			if x.tb.FillSeconds < 3600 && got < x.rate*0.99 {
				t.Fatalf("Encode(%v) refills at %v, over 1%% slower", x.rate, got)
			}
		}
		if ta.FillSeconds != tb.FillSeconds && ta.FillNanos() == tb.FillNanos() {
			t.Fatalf("intervals %d and %d share nanos", ta.FillSeconds, tb.FillSeconds)
		}
	})
}

func TestTTL(t *testing.T) {
	for _, tc := range []struct {
		period time.Duration
		factor float64
		want   int64
	}{
		{5 * time.Second, 3, 15},
		{time.Second, 3, 3},
		{1500 * time.Millisecond, 3, 5},
		{5 * time.Second, 1, 6},
	} {
		if got := quota.TTL(tc.period, tc.factor); got != tc.want {
			t.Errorf("TTL(%v, %v) = %d, want %d", tc.period, tc.factor, got, tc.want)
		}
	}
}
