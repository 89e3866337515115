package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// shiftRun is a run of demand shifts on the simulated fleet, sampled
// every step: what the Envoys hold in all, and what they admit.
type shiftRun struct {
	c        *cluster
	ts       []*envoysim.Traffic
	step     time.Duration
	maxHeld  float64       // the most held at once, after the first answers
	worstAt  time.Duration // when
	admitted []float64     // per step
	elapsed  time.Duration
	last     map[*envoysim.Traffic]uint64
}

// run runs d in steps, recording what is held and admitted.
func (r *shiftRun) run(d time.Duration) {
	for done := time.Duration(0); done < d; done += r.step {
		r.c.run(r.step)
		r.elapsed += r.step
		held, n := 0.0, 0.0
		for _, tr := range r.ts {
			if st := tr.Envoy.State(tr.Bucket); st.Strategy != nil || st.Fallback {
				held += tr.Envoy.Held(tr.Bucket)
			}
			a := tr.Envoy.Counts(tr.Bucket).Allowed
			n += float64(a - r.last[tr])
			r.last[tr] = a
		}
		r.admitted = append(r.admitted, n)
		if held > r.maxHeld {
			r.maxHeld, r.worstAt = held, r.elapsed
		}
	}
}

// window sums what was admitted over [from, from+d).
func (r *shiftRun) window(from, d time.Duration) float64 {
	sum := 0.0
	for i := int(from / r.step); i < int((from+d)/r.step) && i < len(r.admitted); i++ {
		sum += r.admitted[i]
	}
	return sum
}

// TestDemandShifts: issue 27's demand shifts, on one replica and across
// two, under both readings of Envoy's replaced bucket. Four Envoys ask
// 600/s each of a 300/s limit; three drop to 1/s (busy to idle), then go
// back to 600/s (idle to busy); then the first jumps from idle while the
// others were just cut. docs/rlqs.md, "How far over the limit": at every
// step the rates the Envoys hold add up to at most the limit and the
// slack of settling (C(1+eps)); from the first answers on, no 5 s window
// admits more than 110% of the limit; and the admitted total of every
// report period is within 10% of the limit from the first report after
// the shift on, whether it came just after the Envoys' reports (the next
// report shows it) or between them (the next report's counts fix the
// step's time and new rate: quota.Client's stepped reading).
func TestDemandShifts(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		for _, mode := range []envoysim.Replace{envoysim.ReplaceFullOrEmpty, envoysim.ReplacePartial} {
			t.Run(fmt.Sprintf("%d replicas, replace %d", replicas, mode), func(t *testing.T) {
				checkShifts(t, replicas, mode)
			})
		}
	}
}

func checkShifts(t *testing.T, replicas int, mode envoysim.Replace) {
	const limit = 300.0
	cfg := quota.Config{}.WithDefaults()
	capacity := limit * (1 + cfg.Slack())
	c := newCluster(t, clusterOptions{replicas: replicas})
	period := c.period
	r := &shiftRun{c: c, step: 10 * time.Millisecond, last: map[*envoysim.Traffic]uint64{}}
	for i := range 4 {
		r.ts = append(r.ts, c.fleet.Send(c.envoy(i%replicas, envoysim.Config{Replace: mode}), bucketA, 600))
	}
	// The Envoys report at 5.01s, 10.01s, ...: a shift comes 10ms after
	// a report, or halfway between two; settled is when the first period
	// that starts after it ends.
	type shift struct {
		at, settled time.Duration
		rates       []float64
	}
	after := func(k int) (time.Duration, time.Duration) {
		return time.Duration(k)*period + 20*time.Millisecond, time.Duration(k+1)*period + 20*time.Millisecond
	}
	between := func(k int) (time.Duration, time.Duration) {
		return time.Duration(k)*period + period/2, time.Duration(k+1)*period + 20*time.Millisecond
	}
	at := func(f func(int) (time.Duration, time.Duration), k int, rates ...float64) shift {
		a, b := f(k)
		return shift{a, b, rates}
	}
	shifts := []shift{
		at(after, 3, 600, 1, 1, 1),       // busy to idle
		at(after, 7, 600, 600, 600, 600), // idle to busy
		at(between, 11, 1, 600, 600, 600),
		at(between, 16, 600, 1, 1, 1), // the idle one jumps as the others fall
		at(after, 21, 600, 600, 600, 600),
	}
	end := 26 * period
	for _, s := range shifts {
		r.run(s.at - r.elapsed)
		for i, rate := range s.rates {
			r.ts[i].SetRate(rate)
		}
	}
	r.run(end - r.elapsed)

	if r.maxHeld > capacity*(1+1e-9) {
		t.Errorf("the Envoys held %.1f/s at %v, over the limit and slack (%.1f)", r.maxHeld, r.worstAt, capacity)
	}
	worst, worstAt := 0.0, time.Duration(0)
	for from := 2 * period; from+5*time.Second <= end; from += r.step {
		if w := r.window(from, 5*time.Second); w > worst {
			worst, worstAt = w, from
		}
	}
	if worst > 1.1*limit*5 {
		t.Errorf("the 5s window at %v admitted %.0f, over 110%% of %.0f", worstAt, worst, limit*5)
	}
	for i, s := range shifts {
		to := end
		if i+1 < len(shifts) {
			to = shifts[i+1].at
		}
		for from := s.settled; from+period <= to; from += period {
			if got := r.window(from, period) / period.Seconds(); got < 0.9*limit || got > 1.1*limit {
				t.Errorf("shift %d: the period from %v admitted %.1f/s, not within 10%% of %.0f", i, from, got, limit)
			}
		}
	}
	t.Logf("held at most %.1f/s (cap %.1f); worst 5s window %.0f (%.1f%% of %.0f) at %v",
		r.maxHeld, capacity, worst, 100*worst/(limit*5), limit*5, worstAt)
	c.checkClean()
}
