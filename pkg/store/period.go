package store

import "github.com/fastlimit/fastlimit/pkg/limiter"

// window returns the window of window op holding now: its start and end,
// Unix ms. Windows are Window long from the Unix epoch, or the periods of
// op's calendar.
func window(op *limiter.Op, now int64) (start, end int64) {
	if c := op.Calendar; c != nil {
		return c.Period(now)
	}
	start = now - now%op.Window
	return start, start + op.Window
}

// windowBefore returns the start of op's window before the one that
// starts at start.
func windowBefore(op *limiter.Op, start int64) int64 {
	if c := op.Calendar; c != nil {
		s, _ := c.Period(start - 1)
		return s
	}
	return start - op.Window
}

// windowAfter returns the end of op's window after the one that ends at
// end.
func windowAfter(op *limiter.Op, end int64) int64 {
	if c := op.Calendar; c != nil {
		_, e := c.Period(end)
		return e
	}
	return end + op.Window
}
