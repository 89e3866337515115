package lua

import (
	"strings"
	"testing"
)

// TestInclude: the scripts that share arith.lua hold it once, in place of
// their include line; fixed_window.lua is sent as it is on disk.
func TestInclude(t *testing.T) {
	for name, tc := range map[string]struct{ script, src string }{
		"sliding_window.lua": {SlidingWindow, slidingWindowSrc},
		"token_bucket.lua":   {TokenBucket, tokenBucketSrc},
		"atomic.lua":         {Atomic, atomicSrc},
	} {
		if strings.Count(tc.src, includeLine) != 1 {
			t.Errorf("%s: %d include lines, want 1", name, strings.Count(tc.src, includeLine))
		}
		if strings.Contains(tc.script, includeLine) || strings.Count(tc.script, "local function bucket_decide(") != 1 {
			t.Errorf("%s: arith.lua not included exactly once", name)
		}
		if !strings.HasPrefix(tc.script, "--[[") {
			t.Errorf("%s: the header no longer opens the script", name)
		}
	}
	if FixedWindow != fixedWindowSrc || strings.Contains(FixedWindow, "sliding_decide") {
		t.Error("fixed_window.lua is not sent as it is")
	}
}
