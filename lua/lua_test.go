package lua

import (
	"strings"
	"testing"
)

// TestInclude: the scripts hold arith.lua once, in place of their include
// line, and open with their header.
func TestInclude(t *testing.T) {
	for name, tc := range map[string]struct{ script, src string }{
		"take.lua":    {Take, takeSrc},
		"takeall.lua": {TakeAll, takeAllSrc},
	} {
		if strings.Count(tc.src, includeLine) != 1 {
			t.Errorf("%s: %d include lines, want 1", name, strings.Count(tc.src, includeLine))
		}
		if strings.Contains(tc.script, includeLine) || strings.Count(tc.script, "local function bucket_arith(") != 1 {
			t.Errorf("%s: arith.lua not included exactly once", name)
		}
		if !strings.HasPrefix(tc.script, "--[[") {
			t.Errorf("%s: the header no longer opens the script", name)
		}
	}
	if first, _, _ := strings.Cut(TakeCrossSlot, "\n"); first != "#!lua flags=allow-cross-slot-keys" {
		t.Errorf("TakeCrossSlot opens with %q, want the shebang with its flag", first)
	}
}

// TestMaxString: take.lua's MAXS is arith.lua's MAX, 2^52, as a string,
// and fixed.lua saturates where they do.
func TestMaxString(t *testing.T) {
	if !strings.Contains(arith, "local MAX = 4503599627370496 ") || !strings.Contains(takeSrc, "local MAXS = '4503599627370496'") ||
		!strings.Contains(fixedSrc, "local MAX = 4503599627370496 ") || !strings.Contains(fixedSrc, "'4503599627370496'") ||
		1<<52 != 4503599627370496 {
		t.Error("MAX and MAXS disagree, or are no longer 2^52")
	}
}
