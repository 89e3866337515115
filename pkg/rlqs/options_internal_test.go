package rlqs

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The default StoreLog writes each change of state once, whatever the
// observations between changes.
func TestChangeLogWritesChangesOnly(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := &changeLog{log: zap.New(core)}
	steps := []struct {
		down, changed bool
	}{{false, false}, {true, true}, {true, false}, {false, true}, {false, false}, {true, true}}
	for i, s := range steps {
		var changed bool
		if s.down {
			changed = c.Down("down")
		} else {
			changed = c.Up("up")
		}
		if changed != s.changed {
			t.Fatalf("step %d (down %v): changed %v, want %v", i, s.down, changed, s.changed)
		}
	}
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Level.String()+" "+e.Message)
	}
	want := []string{"warn down", "info up", "warn down"}
	if len(got) != len(want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("lines %q, want %q", got, want)
		}
	}
}
