package reload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

func TestChanges(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T, dir string)
		change func(t *testing.T, dir string)
	}{
		{"create", nil, func(t *testing.T, dir string) { files.Write(t, filepath.Join(dir, "a.yaml"), "x") }},
		{"write", func(t *testing.T, dir string) { files.Write(t, filepath.Join(dir, "a.yaml"), "x") },
			func(t *testing.T, dir string) { files.Write(t, filepath.Join(dir, "a.yaml"), "y") }},
		{"remove", func(t *testing.T, dir string) { files.Write(t, filepath.Join(dir, "a.yaml"), "x") },
			func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
					t.Fatal(err)
				}
			}},
		{"rename into place", func(t *testing.T, dir string) { files.Write(t, filepath.Join(dir, "a.yaml"), "x") },
			func(t *testing.T, dir string) {
				files.Write(t, filepath.Join(dir, ".a.yaml.tmp"), "y")
				if err := os.Rename(filepath.Join(dir, ".a.yaml.tmp"), filepath.Join(dir, "a.yaml")); err != nil {
					t.Fatal(err)
				}
			}},
		{"rename in from outside", nil, func(t *testing.T, dir string) {
			src := filepath.Join(t.TempDir(), "b.yaml")
			files.Write(t, src, "x")
			if err := os.Rename(src, filepath.Join(dir, "b.yaml")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			r := newRig(t, dir, "", reload.Options{})
			s0 := r.clk.Started()
			tc.change(t, dir)
			if n := r.sync() - s0 - 1; n < 1 {
				t.Fatal("the change armed no timer")
			}
			r.expect(reload.CauseChange, within)
			r.idle()
		})
	}
}

func TestChmodAloneDoesNotReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	files.Write(t, path, "x")
	r := newRig(t, dir, "", reload.Options{})
	r.ignores("a chmod", func() {
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBurstMakesOneReload: writes less than a Debounce apart postpone
// the reload to a Debounce after the last.
func TestBurstMakesOneReload(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, "a.yaml", reload.Options{})
	start := r.clk.Now()
	for i := range 9 {
		files.Write(t, filepath.Join(dir, "a.yaml"), fmt.Sprint(i))
		r.sync()
		r.advance(debounce / 2)
	}
	if len(r.sights) != 0 {
		t.Fatalf("a reload within the burst")
	}
	s := r.expect(reload.CauseChange, within)
	if took := s.at.Sub(start); took < 9*debounce/2+debounce {
		t.Errorf("reloaded %v after the burst's start, before a Debounce after its last write", took)
	}
	if s.content != "8" {
		t.Errorf("reload read %q, want the last write", s.content)
	}
	r.idle()
}

// TestMaxDelayBoundsAStream: a steady stream of atomic replacements (new
// files here) reloads within MaxDelay.
func TestMaxDelayBoundsAStream(t *testing.T) {
	const maxDelay = 2 * debounce
	dir := t.TempDir()
	r := newRig(t, dir, "", reload.Options{MaxDelay: maxDelay, Loaded: rulesOnly})
	start := r.clk.Now()
	for i := range 20 {
		files.Replace(t, filepath.Join(dir, fmt.Sprintf("a%d.yaml", i)), "x")
		r.sync()
		r.advance(debounce / 2)
		if len(r.sights) > 0 {
			if took := r.clk.Since(start); took > maxDelay {
				t.Errorf("reloaded %v after the stream's start, want within MaxDelay %v", took, maxDelay)
			}
			return
		}
	}
	t.Fatalf("a steady stream of writes postponed the reload past %v", 10*debounce)
}

// TestConfigMapSwap updates the directory the way the kubelet updates a
// ConfigMap volume: a new timestamped directory, a temporary "..data_tmp"
// symlink to it, renamed over "..data", and the old directory removed.
func TestConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	files.Volume(t, dir, map[string]string{"rules.yaml": "v1"})
	r := newRig(t, dir, "rules.yaml", reload.Options{})

	files.Volume(t, dir, map[string]string{"rules.yaml": "v2"})
	r.sync()
	if s := r.expect(reload.CauseChange, within); s.content != "v2" {
		t.Fatalf("rules.yaml reads %q, want v2", s.content)
	}
	r.idle()
}

// TestTrigger: Trigger reloads at once, whatever the Debounce.
func TestTrigger(t *testing.T) {
	r := newRig(t, t.TempDir(), "", reload.Options{Debounce: time.Hour})
	r.w.Trigger()
	r.triggered()
	r.idle()
}

func TestTriggersCoalesceWhileReloading(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	calls := make(chan string, 10)
	w := reload.New(dir, func(ctx context.Context, cause string) {
		calls <- cause
		<-release
	}, reload.Options{}, zaptest.NewLogger(t))
	if err := w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Trigger()
	<-calls // the first reload is running
	for range 5 {
		w.Trigger()
	}
	release <- struct{}{}
	<-calls // the five triggers made one more
	close(release)
	// A trigger's reload needs no timer: one left pending would come at
	// once. This quiet time is real, and longer than it needs.
	select {
	case c := <-calls:
		t.Fatalf("extra reload (%s)", c)
	case <-time.After(200 * time.Millisecond):
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDirectoryComesBack: a directory renamed away reloads (finding it
// gone), is looked for every Rewatch, and reloads once back; the new
// directory is watched.
func TestDirectoryComesBack(t *testing.T) {
	const rewatch = 30 * time.Millisecond // shorter than the Debounce
	parent := t.TempDir()
	dir := filepath.Join(parent, "rules")
	mkdir(t, dir)
	r := newRig(t, dir, "", reload.Options{Rewatch: rewatch})

	if err := os.Rename(dir, filepath.Join(parent, "old")); err != nil {
		t.Fatal(err)
	}
	r.awaitArmed(rewatch)                // the directory is looked for
	r.expect(reload.CauseChange, within) // the reload that finds it gone
	mkdir(t, dir)
	r.awaitArmed(debounce) // the directory's creation, seen in its parent
	r.expect(reload.CauseRewatch, rewatch)
	r.idle()
	// The new directory is watched.
	files.Write(t, filepath.Join(dir, "a.yaml"), "x")
	r.sync()
	r.expect(reload.CauseChange, within)
	r.idle()
}

func TestOpenFailsOnMissingDirectory(t *testing.T) {
	w := reload.New(filepath.Join(t.TempDir(), "missing"), func(context.Context, string) {}, reload.Options{}, zaptest.NewLogger(t))
	if err := w.Open(context.Background()); err == nil {
		t.Fatal("Open succeeded on a missing directory")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	w := reload.New(t.TempDir(), func(context.Context, string) {}, reload.Options{}, zaptest.NewLogger(t))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	w.Trigger() // no-op after Close
}

// TestInPlaceWritesSettle writes a file in two pieces, past the Debounce
// and within the Settle time of each other: the only reload sees the
// whole file, a Settle time after the last piece.
func TestInPlaceWritesSettle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	files.Write(t, path, "old")
	r := newRig(t, dir, "a.yaml", reload.Options{Loaded: rulesOnly})

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("first half, "); err != nil {
		t.Fatal(err)
	}
	r.sync()
	r.advance(debounce) // the settle time starts
	r.advance(settle / 2)
	if _, err := f.WriteString("second half"); err != nil {
		t.Fatal(err)
	}
	r.sync()
	last := r.clk.Now()
	s := r.expect(reload.CauseChange, within)
	if s.content != "first half, second half" {
		t.Fatalf("reload saw %q", s.content)
	}
	if took := s.at.Sub(last); took < settle {
		t.Errorf("reloaded %v after the last write, before the Settle time %v", took, settle)
	}
	r.idle()
}

// TestAtomicReplacementsSkipSettle: with a Settle far longer than the
// test, creates, renames into place (from a temporary dotfile written in
// the directory), removals and ConfigMap swaps reload after the debounce.
func TestAtomicReplacementsSkipSettle(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"create", func(t *testing.T, dir string) { files.Replace(t, filepath.Join(dir, "b.yaml"), "x") }},
		{"rename into place", func(t *testing.T, dir string) { files.Replace(t, filepath.Join(dir, "a.yaml"), "y") }},
		{"remove", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files.Write(t, filepath.Join(dir, "a.yaml"), "x")
			r := newRig(t, dir, "", reload.Options{Settle: time.Hour, Loaded: rulesOnly})
			tc.change(t, dir)
			r.sync()
			r.expect(reload.CauseChange, debounce)
			r.idle()
		})
	}
}

// TestInPlaceWriteWaitsForSettle: an in-place write does not reload before
// Settle; Trigger still does.
func TestInPlaceWriteWaitsForSettle(t *testing.T) {
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "a.yaml"), "x")
	r := newRig(t, dir, "", reload.Options{Settle: time.Hour, Loaded: rulesOnly})
	files.Write(t, filepath.Join(dir, "a.yaml"), "y")
	r.sync()
	r.advance(debounce)
	r.advance(time.Hour - time.Second)
	if len(r.sights) != 0 {
		t.Fatal("an in-place write reloaded before Settle")
	}
	r.w.Trigger()
	r.triggered()
	r.idle()
}

// TestSettleComparesFingerprints: a directory whose fingerprint changes
// without events (writes fsnotify does not report, such as through mmap)
// reloads only once two fingerprints Settle apart agree.
func TestSettleComparesFingerprints(t *testing.T) {
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "a.yaml"), "x")
	var calls atomic.Int32
	r := newRig(t, dir, "", reload.Options{Fingerprint: func() (string, error) {
		n := calls.Add(1)
		return fmt.Sprint(min(n, 4)), nil // changes three times, then holds
	}})
	files.Write(t, filepath.Join(dir, "a.yaml"), "y")
	r.sync()
	s := r.expect(reload.CauseChange, debounce+4*settle)
	if n := calls.Load(); n != 5 {
		t.Fatalf("reloaded after %d fingerprints, want 5 (4 then 4 again)", n)
	}
	if took := s.at.Sub(r.clk.Now()); took != 0 {
		t.Fatal("the clock moved past the reload")
	}
	r.idle()
}

// TestRecursive watches a tree: writes in nested directories reload, in
// directories created after Open too; a ConfigMap's ".." directories are
// not watched themselves (their swap shows in the directory).
func TestRecursive(t *testing.T) {
	dir := t.TempDir()
	nested := filepath.Join(dir, "a", "b")
	mkdir(t, nested)
	r := newRig(t, dir, "", reload.Options{Recursive: true})

	files.Write(t, filepath.Join(nested, "r.yaml"), "x")
	r.sync()
	r.expect(reload.CauseChange, within)

	fresh := filepath.Join(dir, "c", "d")
	mkdir(t, fresh)
	r.sync()
	r.expect(reload.CauseChange, within) // the directories appearing
	r.idle()
	s0 := r.clk.Started()
	files.Write(t, filepath.Join(fresh, "r.yaml"), "y")
	if n := r.sync() - s0 - 1; n < 1 {
		t.Fatal("a write in a directory created after Open armed no timer")
	}
	r.expect(reload.CauseChange, within)

	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	r.sync()
	r.expect(reload.CauseChange, within)
	r.idle()
	mkdir(t, filepath.Join(dir, "..2026_01_01")) // an entry of the directory
	r.sync()
	r.expect(reload.CauseChange, within)
	r.ignores("a write in a ConfigMap's data directory", func() {
		files.Write(t, filepath.Join(dir, "..2026_01_01", "r.yaml"), "x")
	})
}

// TestNotRecursive keeps the flat watch: a write in a subdirectory does
// not reload.
func TestNotRecursive(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	mkdir(t, sub)
	r := newRig(t, dir, "", reload.Options{})
	r.ignores("a write in a subdirectory", func() { files.Write(t, filepath.Join(sub, "r.yaml"), "x") })
}

// TestRootSwap swaps the root symlink above the watched directory, as a
// RUNTIME_WATCH_ROOT deployment does: the swap reloads, entries beside
// the root do not, and the new tree is watched afterwards.
func TestRootSwap(t *testing.T) {
	base := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		mkdir(t, filepath.Join(base, v, "app", "config", "nested"))
	}
	root := filepath.Join(base, "current")
	if err := os.Symlink("v1", root); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, filepath.Join(root, "app", "config"), "", reload.Options{Recursive: true, Root: root})

	r.ignores("an entry beside the root", func() { files.Write(t, filepath.Join(base, "unrelated"), "x") })

	swapLink(t, "v2", root)
	r.awaitArmed(debounce) // the new tree is not watched yet: no marker
	r.expect(reload.CauseChange, within)
	r.idle()

	// The new target is watched, its nested directories too; the old is not.
	r.ignores("a write in the old tree", func() {
		files.Write(t, filepath.Join(base, "v1", "app", "config", "nested", "r.yaml"), "old")
	})
	files.Write(t, filepath.Join(base, "v2", "app", "config", "nested", "r.yaml"), "new")
	r.sync()
	r.expect(reload.CauseChange, within)
	r.idle()
}

// TestPathSymlinkSwap is git-sync's layout: the watched path is a symlink
// to a checkout, swapped atomically to a new one, the old one removed
// afterwards. The swap reloads the new rules within 2 s; the new checkout
// is watched, the old one no longer.
func TestPathSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	for _, rev := range []string{"r1", "r2"} {
		mkdir(t, filepath.Join(base, ".worktrees", rev))
		files.Write(t, filepath.Join(base, ".worktrees", rev, "rules.yaml"), rev)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(".worktrees/r1", link); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, link, "rules.yaml", reload.Options{Loaded: rulesOnly, Debounce: reload.DefaultDebounce, Settle: reload.DefaultSettle})

	r.ignores("an entry beside the path", func() { files.Write(t, filepath.Join(base, "unrelated"), "x") })

	swapLink(t, ".worktrees/r2", link)
	r.awaitArmed(reload.DefaultDebounce)
	r.expectContent("r2", within)
	r.idle()

	r.ignores("the old checkout", func() {
		files.Write(t, filepath.Join(base, ".worktrees", "r1", "rules.yaml"), "old checkout")
		if err := os.RemoveAll(filepath.Join(base, ".worktrees", "r1")); err != nil {
			t.Fatal(err)
		}
	})

	files.Replace(t, filepath.Join(base, ".worktrees", "r2", "rules.yaml"), "r2 edited")
	r.sync()
	r.expectContent("r2 edited", within)
	r.idle()
}

// TestDirectoryRemovedAndCreated removes the directory and creates it
// again (rm -rf, mkdir, write), at once and at a human's pace: the new
// rules reload within 2 s of the last write, and the new directory is
// watched.
func TestDirectoryRemovedAndCreated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause time.Duration // between the steps, on the clock
		put   func(t testing.TB, path, body string)
	}{
		{"at once, written in place", 0, files.Write[string]},
		{"at once, renamed into place", 0, files.Replace},
		{"paced, written in place", 700 * time.Millisecond, files.Write[string]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "rules")
			mkdir(t, dir)
			files.Write(t, filepath.Join(dir, "a.yaml"), "v1")
			r := newRig(t, dir, "a.yaml", reload.Options{Loaded: rulesOnly,
				Debounce: reload.DefaultDebounce, Settle: reload.DefaultSettle})

			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			r.awaitArmed(reload.DefaultRewatch) // the directory is looked for
			r.advance(tc.pause)
			mkdir(t, dir)
			r.advance(tc.pause)
			tc.put(t, filepath.Join(dir, "a.yaml"), "v2")
			r.expectContent("v2", within)

			tc.put(t, filepath.Join(dir, "a.yaml"), "v3")
			r.sync()
			r.expectContent("v3", within)
			r.idle()
		})
	}
}

// TestContentCheckFindsASwapAbove swaps a symlink above the watched
// directory, which no watch sees without Root: the content check finds
// the path leading to another directory, reloads, and watches it.
func TestContentCheckFindsASwapAbove(t *testing.T) {
	base := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		mkdir(t, filepath.Join(base, v, "rules"))
		files.Write(t, filepath.Join(base, v, "rules", "a.yaml"), v)
	}
	current := filepath.Join(base, "current")
	if err := os.Symlink("v1", current); err != nil {
		t.Fatal(err)
	}
	const check = 5 * time.Second
	dir := filepath.Join(current, "rules")
	r := newRig(t, dir, "a.yaml", reload.Options{Check: check, Loaded: rulesOnly})
	for range 2 { // checks that find nothing reload nothing
		r.advance(check)
		r.idle()
	}

	swapLink(t, "v2", current)
	if s := r.expectContent("v2", check); s.cause != reload.CauseCheck {
		t.Errorf("reloaded by %q, want %q", s.cause, reload.CauseCheck)
	}
	files.Replace(t, filepath.Join(base, "v2", "rules", "a.yaml"), "v2 edited")
	r.sync()
	if s := r.expectContent("v2 edited", within); s.cause != reload.CauseChange {
		t.Errorf("the new directory's edit reloaded by %q, want %q: not watched", s.cause, reload.CauseChange)
	}
	r.idle()
}

// TestContentCheckFindsUnreportedChanges: rules that change with no event
// (here a Fingerprint that changes once) reload once by the check.
func TestContentCheckFindsUnreportedChanges(t *testing.T) {
	const check = 5 * time.Second
	var version atomic.Int32
	r := newRig(t, t.TempDir(), "", reload.Options{Check: check,
		Fingerprint: func() (string, error) { return string(rune('a' + version.Load())), nil }})
	r.advance(check)
	r.idle()
	version.Add(1)
	r.expect(reload.CauseCheck, check)
	r.advance(check)
	r.idle()
}
