package redistest

import (
	"sync"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// Outage records what a load on a counter saw around the kill of a Redis
// node: when its calls failed and succeeded again, and the counter values
// its successful calls showed. It is safe for concurrent use.
type Outage struct {
	mu        sync.Mutex
	killAt    time.Time
	firstFail time.Time // the first failure after the kill
	lastFail  time.Time // the last one
	lastOK    time.Time
	ok        int64
	failed    int64
	counts    []int64
	errs      []string
}

// Figures are what an Outage saw.
type Figures struct {
	OK, Failed int64
	// FirstFail and LastFail are the first and the last failure after the
	// kill, from the kill; 0 without one.
	FirstFail, LastFail time.Duration
	// Lost counts the counter values two successful calls showed: hits
	// the old master acknowledged and lost with it (replication is
	// asynchronous). Gaps counts the values between the lowest and the
	// highest that no successful call showed: hits that ran without a
	// successful answer.
	Lost, Gaps int64
	Errors     []string // the first five failures
}

// Kill notes when the node was killed: the failures after it make the
// outage.
func (o *Outage) Kill(at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.killAt = at
}

// Record records a call: one that succeeded and showed the counter's
// value count, or one that failed with err.
func (o *Outage) Record(count int64, err error) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		o.ok++
		o.counts = append(o.counts, count)
		o.lastOK = now
		return
	}
	o.failed++
	if !o.killAt.IsZero() {
		if o.firstFail.IsZero() {
			o.firstFail = now
		}
		o.lastFail = now
	}
	if len(o.errs) < 5 {
		o.errs = append(o.errs, err.Error())
	}
}

// WaitRecovered waits until calls have succeeded for quiet with no
// failure, at most d after the kill, and reports whether they did.
func (o *Outage) WaitRecovered(d, quiet time.Duration) bool {
	o.mu.Lock()
	left := d - time.Since(o.killAt)
	o.mu.Unlock()
	return wait.True(left, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.lastOK.After(o.lastFail) && time.Since(o.lastFail) > quiet && time.Since(o.killAt) > quiet
	})
}

// Figures returns what o saw so far.
func (o *Outage) Figures() Figures {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := Figures{OK: o.ok, Failed: o.failed, Errors: append([]string(nil), o.errs...)}
	if !o.firstFail.IsZero() {
		f.FirstFail, f.LastFail = o.firstFail.Sub(o.killAt), o.lastFail.Sub(o.killAt)
	}
	seen := map[int64]bool{}
	lo, hi := int64(1)<<62, int64(0)
	for _, c := range o.counts {
		seen[c] = true
		lo, hi = min(lo, c), max(hi, c)
	}
	if len(seen) > 0 {
		f.Lost = int64(len(o.counts) - len(seen))
		f.Gaps = hi - lo + 1 - int64(len(seen))
	}
	return f
}
