package flap_test

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/observe/flap"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
)

// A condition flapping 1,000 times a second for 30 s writes a line for
// its first change, then one per interval, each counting the changes.
func TestFlapsLoggedOncePerInterval(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	clk := clock.New(time.Unix(1000, 0))
	c := flap.New(zap.New(core), 10*time.Second, clk)
	changes := 0
	for i := range 30_000 {
		clk.Advance(time.Millisecond)
		if i%2 == 0 {
			if c.Down("fails") {
				changes++
			}
		} else if c.Up("succeeds again") {
			changes++
		}
	}
	lines := logs.All()
	if len(lines) < 2 || len(lines) > 5 {
		t.Fatalf("%d lines for 30 s of flaps at 10 s intervals, want 2 to 5", len(lines))
	}
	counted := 0
	for _, l := range lines {
		counted += int(l.ContextMap()["changes"].(int64))
	}
	if first := lines[0].ContextMap()["changes"].(int64); first != 1 || lines[0].Message != "fails" {
		t.Errorf("first line %q counts %d changes, want \"fails\" and 1", lines[0].Message, first)
	}
	if counted > changes || counted < changes-10_001 {
		t.Errorf("lines count %d changes of %d", counted, changes)
	}
}

// A steady state writes nothing after its first line; a change after a
// quiet interval is logged at once.
func TestSteadyState(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	clk := clock.New(time.Unix(1000, 0))
	c := flap.New(zap.New(core), time.Second, clk)
	tests := []struct {
		step      time.Duration
		down      bool
		wantLines int
	}{
		{0, false, 0},                // up, as it starts: nothing
		{time.Millisecond, true, 1},  // down: logged at once
		{time.Minute, true, 1},       // still down
		{time.Millisecond, false, 2}, // up a minute after the last line: at once
		{10 * time.Millisecond, true, 2},
		{10 * time.Millisecond, false, 2}, // back up within the interval
		{time.Second, false, 3},           // the two changes, counted
		{time.Second, false, 3},
	}
	for i, tt := range tests {
		clk.Advance(tt.step)
		if tt.down {
			c.Down("down")
		} else {
			c.Up("up")
		}
		if got := logs.Len(); got != tt.wantLines {
			t.Fatalf("step %d: %d lines, want %d", i, got, tt.wantLines)
		}
	}
	if last := logs.All()[2]; last.Message != "up" || last.ContextMap()["changes"].(int64) != 2 {
		t.Errorf("third line %q %v, want up with 2 changes", last.Message, last.ContextMap())
	}
}

// WithFlush: a change held back is written once the interval is over,
// though nothing is observed again; not before, and only once.
func TestFlush(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	clk := clock.New(time.Unix(1000, 0))
	c := flap.New(zap.New(core), time.Second, clk).WithFlush()
	c.Down("down")
	clk.Advance(300 * time.Millisecond)
	c.Up("up")
	c.Down("down")
	c.Up("up")
	if n, p := logs.Len(), clk.Pending(); n != 1 || len(p) != 1 || p[0] != 700*time.Millisecond {
		t.Fatalf("%d lines, flushes pending in %v; want the first line, one flush at the interval's end", n, p)
	}
	clk.Advance(700*time.Millisecond - 1)
	if logs.Len() != 1 {
		t.Fatalf("%d lines before the interval's end, want 1", logs.Len())
	}
	clk.Advance(1)
	if logs.Len() != 2 {
		t.Fatalf("%d lines at the interval's end, want 2", logs.Len())
	}
	if last := logs.All()[1]; last.Message != "up" || last.ContextMap()["changes"].(int64) != 3 {
		t.Errorf("flushed line %q %v, want up with 3 changes", last.Message, last.ContextMap())
	}
	clk.Advance(time.Hour)
	if logs.Len() != 2 || clk.Waiters() != 0 {
		t.Errorf("%d lines, %d timers after the flush; want 2 and none", logs.Len(), clk.Waiters())
	}
}

// Without WithFlush, a change held back waits for the next observation.
func TestNoFlush(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	clk := clock.New(time.Unix(1000, 0))
	c := flap.New(zap.New(core), time.Second, clk)
	c.Down("down")
	c.Up("up")
	clk.Advance(time.Hour)
	if logs.Len() != 1 || clk.Waiters() != 0 {
		t.Errorf("%d lines, %d timers; want 1 and none", logs.Len(), clk.Waiters())
	}
	c.Up("up")
	if logs.Len() != 2 {
		t.Errorf("%d lines after the next observation, want 2", logs.Len())
	}
}
