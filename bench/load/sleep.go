package load

import "time"

// sleeper sleeps the pacer of an open-loop phase until its next arrival.
type sleeper interface {
	sleep(d time.Duration)
	close()
}

// goSleeper sleeps on Go's timers.
type goSleeper struct{}

func (goSleeper) sleep(d time.Duration) { time.Sleep(d) }
func (goSleeper) close()                {}

// until returns at t, or at once if t has passed.
func until(s sleeper, t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		s.sleep(d)
	}
}
