package envoysim_test

import (
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/clock"
)

func TestManualClockAfterFunc(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run arms a timer with arm and steps it and c; it returns
		// whether f must have run.
		run func(t *testing.T, c *envoysim.ManualClock, arm func(time.Duration) clock.Timer) bool
	}{
		{"fires once passed", func(t *testing.T, c *envoysim.ManualClock, arm func(time.Duration) clock.Timer) bool {
			arm(time.Second)
			c.Advance(time.Second)
			return true
		}},
		{"Stop prevents f", func(t *testing.T, c *envoysim.ManualClock, arm func(time.Duration) clock.Timer) bool {
			tm := arm(time.Second)
			if !tm.Stop() {
				t.Error("Stop of a pending timer reported it was not pending")
			}
			if tm.Stop() {
				t.Error("a second Stop reported it stopped the timer")
			}
			c.Advance(time.Hour)
			return false
		}},
		{"Reset moves it later", func(t *testing.T, c *envoysim.ManualClock, arm func(time.Duration) clock.Timer) bool {
			tm := arm(time.Second)
			if !tm.Reset(time.Minute) {
				t.Error("Reset of a pending timer reported it was not pending")
			}
			c.Advance(time.Second)
			if !tm.Stop() {
				t.Fatal("the timer fired at its first time, not its reset one")
			}
			tm.Reset(time.Minute)
			c.Advance(time.Minute)
			return true
		}},
		{"Reset re-arms a fired timer", func(t *testing.T, c *envoysim.ManualClock, arm func(time.Duration) clock.Timer) bool {
			tm := arm(time.Second)
			c.Advance(time.Second)
			if tm.Reset(time.Second) {
				t.Error("Reset of a fired timer reported it was pending")
			}
			c.Advance(time.Second)
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := envoysim.NewManualClock(time.Unix(1_000_000, 0))
			ran := make(chan struct{}, 4)
			arm := func(d time.Duration) clock.Timer { return c.AfterFunc(d, func() { ran <- struct{}{} }) }
			if !tc.run(t, c, arm) {
				select {
				case <-ran:
					t.Error("f ran")
				default:
				}
				return
			}
			select {
			case <-ran:
			case <-time.After(30 * time.Second):
				t.Fatal("f did not run within 30s of the clock passing its time")
			}
		})
	}
}
