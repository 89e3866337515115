package rlqs

import (
	"testing"
	"time"

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

// lineBudget lets max lines through a second and tells the next line let
// through how many were held back.
func TestLineBudget(t *testing.T) {
	b := lineBudget{max: 2}
	at := func(ms int64) time.Time { return time.UnixMilli(1_900_000_000_000 + ms) }
	for i, s := range []struct {
		ms   int64
		ok   bool
		held int
	}{
		{0, true, 0}, {10, true, 0}, {20, false, 0}, {999, false, 0},
		{1000, true, 2}, {1001, true, 0}, {1002, false, 0}, {5000, true, 1},
	} {
		ok, held := b.take(at(s.ms))
		if ok != s.ok || held != s.held {
			t.Errorf("step %d at %d ms: (%v, %d), want (%v, %d)", i, s.ms, ok, held, s.ok, s.held)
		}
	}
}
