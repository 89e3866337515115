//go:build !linux

package load

// newSleeper returns Go's timers.
func newSleeper() sleeper { return goSleeper{} }
