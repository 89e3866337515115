package flap_test

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/observe/flap"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// A condition flapping 1,000 times a second for 30 s writes a line for
// its first change, then one per interval, each counting the changes.
func TestFlapsLoggedOncePerInterval(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	now := time.Unix(1000, 0)
	c := flap.New(zap.New(core), 10*time.Second, func() time.Time { return now })
	changes := 0
	for i := range 30_000 {
		now = now.Add(time.Millisecond)
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
	now := time.Unix(1000, 0)
	c := flap.New(zap.New(core), time.Second, func() time.Time { return now })
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
		now = now.Add(tt.step)
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
// though nothing is observed again.
func TestFlush(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := flap.New(zap.New(core), 50*time.Millisecond, nil).WithFlush()
	c.Down("down")
	c.Up("up")
	wait.For(t, 10*time.Second, func() bool { return logs.Len() == 2 })
	if last := logs.All()[1]; last.Message != "up" || last.ContextMap()["changes"].(int64) != 1 {
		t.Errorf("flushed line %q %v, want up with 1 change", last.Message, last.ContextMap())
	}
	time.Sleep(100 * time.Millisecond)
	if logs.Len() != 2 {
		t.Errorf("%d lines after the flush, want 2", logs.Len())
	}
}
