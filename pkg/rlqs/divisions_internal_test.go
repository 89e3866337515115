package rlqs

import "testing"

// TestDivisionsOnce: a division added again is not listed twice, before
// and after the list grows past divisionsScan, and the list keeps the
// order of first adding.
func TestDivisionsOnce(t *testing.T) {
	all := make([]*division, 3*divisionsScan)
	for i := range all {
		all[i] = &division{key: string(rune('a' + i))}
	}
	var d divisions
	for round := range 3 {
		for i, dv := range all {
			if i%3 <= round {
				d.add(dv)
			}
		}
	}
	if len(d.list) != len(all) {
		t.Fatalf("%d divisions listed, want %d, each once", len(d.list), len(all))
	}
	seen := map[*division]bool{}
	for _, dv := range d.list {
		if seen[dv] {
			t.Fatalf("division %q listed twice", dv.key)
		}
		seen[dv] = true
	}
	if d.list[0] != all[0] || d.list[1] != all[3] {
		t.Fatalf("order %q %q, want the order of first adding (a, d)", d.list[0].key, d.list[1].key)
	}
}
