package reload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// The tests' Watchers run on a fake clock: a debounce, settle time, look
// for a directory or content check ends only when the test advances it.
// Events come from the kernel in real time, so a test waits for the
// watcher to take them (sync) before it advances the clock.
const (
	debounce = 100 * time.Millisecond // the tests' Debounce
	settle   = time.Second            // the tests' Settle
	// within is the bound from a change to its reload, for the
	// changes the watcher sees by events (the default Debounce and Settle).
	within = 2 * time.Second
	// patience bounds each real wait for the watcher.
	patience = 30 * time.Second
	// marker starts the names of the files sync writes.
	marker = ".sync-"
)

// sight is one reload: its cause, what the file read then, and when on
// the clock.
type sight struct {
	cause, content string
	at             time.Time
}

// rig is a Watcher of dir on a fake clock, and what it did.
type rig struct {
	t      *testing.T
	dir    string
	clk    *clock.Clock
	w      *reload.Watcher
	sights chan sight
	marks  chan int // clk.Started() when the watcher took a marker's write
	n      int      // markers written
	checks bool     // the content check runs: one timer is always pending
}

// newRig starts a Watcher of dir whose reloads read dir/read (nothing for
// ""). Zero Options take the tests' Debounce and Settle, no content check,
// and the fake clock; Loaded is wrapped to see the markers.
func newRig(t *testing.T, dir, read string, opts reload.Options) *rig {
	t.Helper()
	r := &rig{t: t, dir: dir, clk: clock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		sights: make(chan sight, 100), marks: make(chan int, 100)}
	if opts.Debounce == 0 {
		opts.Debounce = debounce
	}
	if opts.Settle == 0 {
		opts.Settle = settle
	}
	if opts.Check == 0 {
		opts.Check = -1
	}
	r.checks = opts.Check > 0
	opts.Clock = r.clk
	loaded := opts.Loaded
	opts.Loaded = func(name string) bool {
		if strings.HasPrefix(name, marker) {
			r.marks <- r.clk.Started()
			return false
		}
		return loaded == nil || loaded(name)
	}
	r.w = reload.New(dir, func(ctx context.Context, cause string) {
		var b []byte
		if read != "" {
			b, _ = os.ReadFile(filepath.Join(dir, read))
		}
		r.sights <- sight{cause, string(b), r.clk.Now()}
	}, opts, zaptest.NewLogger(t))
	if err := r.w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.w.Close(); err != nil {
			t.Error(err)
		}
	})
	timers := 1 // the debounce's, and the content check's
	if r.checks {
		timers++
	}
	r.clk.WaitFor(t, "the watcher's timers", func([]time.Duration) bool { return r.clk.Started() >= timers })
	return r
}

// sync writes a marker file into the directory and waits until the
// watcher has taken it, and so every event before it (inotify and
// fsnotify keep their order), and armed its debounce for it. It returns
// how many timers the clock had started when the watcher took the
// marker's write: those started before, and one for the marker's create.
func (r *rig) sync() int {
	r.t.Helper()
	r.n++
	files.Write(r.t, filepath.Join(r.dir, fmt.Sprint(marker, r.n)), "x")
	var s int
	select {
	case s = <-r.marks:
	case <-time.After(patience):
		r.t.Fatalf("the watcher did not take marker %d within %v", r.n, patience)
	}
	r.clk.WaitFor(r.t, "the marker's debounce", func([]time.Duration) bool { return r.clk.Started() > s })
	return s
}

// ignores makes change and fails if the watcher armed a timer for it;
// then it lets the marker's own reload happen.
func (r *rig) ignores(what string, change func()) {
	r.t.Helper()
	s0 := r.clk.Started()
	change()
	if n := r.sync() - s0 - 1; n != 0 {
		r.t.Fatalf("%s armed the watcher's timers %d times, want none", what, n)
	}
	r.next(within)
	r.idle()
}

// advance moves the clock by d and, if a timer was due, waits until the
// watcher has taken it: reloaded, or armed a timer again.
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	p := r.clk.Pending()
	fires := len(p) > 0 && p[0] <= d
	s, n := r.clk.Started(), len(r.sights)
	r.clk.Advance(d)
	if fires && !until(func() bool { return r.clk.Started() > s || len(r.sights) > n }) {
		r.t.Fatalf("the watcher did not take its timer within %v", patience)
	}
}

// next advances the clock, timer after timer, until the watcher reloads,
// and returns the reload; it fails unless the reload comes within bound
// on the clock.
func (r *rig) next(bound time.Duration) sight {
	r.t.Helper()
	start := r.clk.Now()
	for {
		select {
		case s := <-r.sights:
			if took := s.at.Sub(start); took > bound {
				r.t.Fatalf("reload (%s) %v after, want within %v", s.cause, took, bound)
			}
			return s
		default:
		}
		if !until(func() bool { return len(r.sights) > 0 || r.clk.Waiters() > 0 }) {
			r.t.Fatal("no reload, and the watcher waits on no timer")
		}
		if len(r.sights) > 0 {
			continue
		}
		d := r.clk.Pending()[0]
		if r.clk.Now().Add(d).Sub(start) > bound {
			r.t.Fatalf("no reload within %v (pending: %v)", bound, r.clk.Pending())
		}
		r.advance(d)
	}
}

// expect is next, failing unless the reload's cause is want.
func (r *rig) expect(want string, bound time.Duration) sight {
	r.t.Helper()
	s := r.next(bound)
	if s.cause != want {
		r.t.Fatalf("reload cause %q, want %q", s.cause, want)
	}
	return s
}

// triggered waits, without moving the clock, for a reload by Trigger.
func (r *rig) triggered() {
	r.t.Helper()
	select {
	case s := <-r.sights:
		if s.cause != reload.CauseTrigger {
			r.t.Fatalf("reload cause %q, want %q", s.cause, reload.CauseTrigger)
		}
	case <-time.After(patience):
		r.t.Fatalf("no reload within %v of Trigger", patience)
	}
}

// expectContent steps the clock through reloads until one reads want,
// and fails unless it comes within bound on the clock.
func (r *rig) expectContent(want string, bound time.Duration) sight {
	r.t.Helper()
	end := r.clk.Now().Add(bound)
	for {
		s := r.next(end.Sub(r.clk.Now()))
		if s.content == want {
			return s
		}
	}
}

// idle fails if a reload was made, or one is armed (the content check
// aside).
func (r *rig) idle() {
	r.t.Helper()
	select {
	case s := <-r.sights:
		r.t.Fatalf("unexpected reload (%s) reading %q", s.cause, s.content)
	default:
	}
	allowed := 0
	if r.checks {
		allowed = 1
	}
	if p := r.clk.Pending(); len(p) > allowed {
		r.t.Fatalf("a reload is armed: timers pending %v", p)
	}
}

// awaitArmed waits until the watcher armed its debounce of d, for events
// that leave no room for a marker (the directory gone, or its path
// swapped and not watched again yet).
func (r *rig) awaitArmed(d time.Duration) {
	r.t.Helper()
	r.clk.WaitFor(r.t, fmt.Sprint("a timer of ", d), func(p []time.Duration) bool {
		for _, x := range p {
			if x == d {
				return true
			}
		}
		return false
	})
}

// until polls cond every millisecond (wait's pauses grow to 50 ms, too
// long for a wait at every step of the clock) and reports whether it held
// within patience.
func until(cond func() bool) bool {
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-time.After(time.Millisecond)
	}
	return true
}

// rulesOnly is the Loaded of the server: dotfiles are not loaded.
func rulesOnly(name string) bool { return !strings.HasPrefix(name, ".") }

// swapLink points the symlink link at target atomically, as git-sync and
// the kubelet do: a new link beside it, renamed over it.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
