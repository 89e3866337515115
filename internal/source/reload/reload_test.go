package reload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

const (
	debounce = 30 * time.Millisecond
	// settle is the tests' Settle: in-place writes reload after it.
	settle = 100 * time.Millisecond
	// patience bounds how long a test waits for a reload that must come.
	patience = 3 * time.Second
	// quiet is how long a test waits to be sure that no reload comes.
	quiet = 5 * debounce
)

// watch starts a Watcher of dir and returns the causes of its reloads.
func watch(t *testing.T, dir string, opts reload.Options) (*reload.Watcher, <-chan string) {
	t.Helper()
	causes := make(chan string, 100)
	if opts.Debounce == 0 {
		opts.Debounce = debounce
	}
	if opts.Settle == 0 {
		opts.Settle = settle
	}
	w := reload.New(dir, func(ctx context.Context, cause string) { causes <- cause }, opts, zaptest.NewLogger(t))
	if err := w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return w, causes
}

func expect(t *testing.T, causes <-chan string, want string) {
	t.Helper()
	select {
	case got := <-causes:
		if got != want {
			t.Fatalf("reload cause %q, want %q", got, want)
		}
	case <-time.After(patience):
		t.Fatalf("no reload within %s", patience)
	}
}

func expectNone(t *testing.T, causes <-chan string) {
	t.Helper()
	select {
	case got := <-causes:
		t.Fatalf("unexpected reload (%s)", got)
	case <-time.After(quiet):
	}
}

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
			_, causes := watch(t, dir, reload.Options{})
			tc.change(t, dir)
			expect(t, causes, reload.CauseChange)
			expectNone(t, causes)
		})
	}
}

func TestChmodAloneDoesNotReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	files.Write(t, path, "x")
	_, causes := watch(t, dir, reload.Options{})
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	expectNone(t, causes)
}

func TestBurstMakesOneReload(t *testing.T) {
	dir := t.TempDir()
	_, causes := watch(t, dir, reload.Options{Debounce: 100 * time.Millisecond})
	for i := range 20 {
		files.Write(t, filepath.Join(dir, "a.yaml"), string(rune('a'+i)))
		time.Sleep(2 * time.Millisecond)
	}
	expect(t, causes, reload.CauseChange)
	expectNone(t, causes)
}

// TestMaxDelayBoundsAStream: a steady stream of atomic replacements (new
// files here) reloads within MaxDelay.
func TestMaxDelayBoundsAStream(t *testing.T) {
	dir := t.TempDir()
	_, causes := watch(t, dir, reload.Options{Debounce: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Loaded: rulesOnly})
	stop := time.Now().Add(time.Second)
	reloaded := false
	for i := 0; time.Now().Before(stop) && !reloaded; i++ {
		files.Replace(t, filepath.Join(dir, fmt.Sprintf("a%d.yaml", i)), time.Now().String())
		select {
		case <-causes:
			reloaded = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !reloaded {
		t.Fatal("a steady stream of writes postponed the reload past MaxDelay")
	}
}

// TestConfigMapSwap updates the directory the way the kubelet updates a
// ConfigMap volume: a new timestamped directory, a temporary "..data_tmp"
// symlink to it, renamed over "..data", and the old directory removed.
func TestConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	files.Volume(t, dir, map[string]string{"rules.yaml": "v1"})
	_, causes := watch(t, dir, reload.Options{})

	files.Volume(t, dir, map[string]string{"rules.yaml": "v2"})
	expect(t, causes, reload.CauseChange)
	expectNone(t, causes)
	got, err := os.ReadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil || string(got) != "v2" {
		t.Fatalf("rules.yaml reads %q, %v; want v2", got, err)
	}
}

func TestTrigger(t *testing.T) {
	w, causes := watch(t, t.TempDir(), reload.Options{Debounce: time.Hour})
	start := time.Now()
	w.Trigger()
	expect(t, causes, reload.CauseTrigger)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Trigger took %s", took)
	}
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
	select {
	case c := <-calls:
		t.Fatalf("extra reload (%s)", c)
	case <-time.After(quiet):
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDirectoryComesBack(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "rules")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, causes := watch(t, dir, reload.Options{Rewatch: 20 * time.Millisecond})

	if err := os.Rename(dir, filepath.Join(parent, "old")); err != nil {
		t.Fatal(err)
	}
	expect(t, causes, reload.CauseChange) // the reload that finds it gone
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	expect(t, causes, reload.CauseRewatch)
	// The new directory is watched.
	files.Write(t, filepath.Join(dir, "a.yaml"), "x")
	expect(t, causes, reload.CauseChange)
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

// rulesOnly is the Loaded of the server: dotfiles are not loaded.
func rulesOnly(name string) bool { return !strings.HasPrefix(name, ".") }

// TestInPlaceWritesSettle writes a file in two pieces, a while apart but
// less than Settle: the only reload sees the whole file.
func TestInPlaceWritesSettle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	files.Write(t, path, "old")
	seen := make(chan string, 10)
	w := reload.New(dir, func(ctx context.Context, cause string) {
		b, _ := os.ReadFile(path)
		seen <- string(b)
	}, reload.Options{Debounce: debounce, Settle: 500 * time.Millisecond, Loaded: rulesOnly}, zaptest.NewLogger(t))
	if err := w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("first half, "); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past Debounce, within Settle
	if _, err := f.WriteString("second half"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-seen:
		if got != "first half, second half" {
			t.Fatalf("reload saw %q", got)
		}
	case <-time.After(patience):
		t.Fatal("no reload")
	}
	select {
	case got := <-seen:
		t.Fatalf("second reload saw %q", got)
	case <-time.After(700 * time.Millisecond):
	}
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
			_, causes := watch(t, dir, reload.Options{Settle: time.Hour, Loaded: rulesOnly})
			tc.change(t, dir)
			expect(t, causes, reload.CauseChange)
			expectNone(t, causes)
		})
	}
}

// TestInPlaceWriteWaitsForSettle: an in-place write does not reload before
// Settle; Trigger still does.
func TestInPlaceWriteWaitsForSettle(t *testing.T) {
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "a.yaml"), "x")
	w, causes := watch(t, dir, reload.Options{Settle: time.Hour, Loaded: rulesOnly})
	files.Write(t, filepath.Join(dir, "a.yaml"), "y")
	expectNone(t, causes)
	w.Trigger()
	expect(t, causes, reload.CauseTrigger)
	expectNone(t, causes)
}

// TestSettleComparesFingerprints: a directory whose fingerprint changes
// without events (writes fsnotify does not report, such as through mmap)
// reloads only once two fingerprints Settle apart agree.
func TestSettleComparesFingerprints(t *testing.T) {
	dir := t.TempDir()
	files.Write(t, filepath.Join(dir, "a.yaml"), "x")
	var calls atomic.Int32
	// No content check: it would take fingerprints of its own.
	_, causes := watch(t, dir, reload.Options{Settle: 50 * time.Millisecond, Check: -1, Fingerprint: func() (string, error) {
		n := calls.Add(1)
		return fmt.Sprint(min(n, 4)), nil // changes three times, then holds
	}})
	files.Write(t, filepath.Join(dir, "a.yaml"), "y")
	expect(t, causes, reload.CauseChange)
	if n := calls.Load(); n != 5 {
		t.Fatalf("reloaded after %d fingerprints, want 5 (4 then 4 again)", n)
	}
	expectNone(t, causes)
}

// TestRecursive watches a tree: writes in nested directories reload, in
// directories created after Open too; a ConfigMap's ".." directories are
// not watched themselves (their swap shows in the directory).
func TestRecursive(t *testing.T) {
	dir := t.TempDir()
	nested := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	_, causes := watch(t, dir, reload.Options{Recursive: true})

	files.Write(t, filepath.Join(nested, "r.yaml"), "x")
	expect(t, causes, reload.CauseChange)

	fresh := filepath.Join(dir, "c", "d")
	if err := os.MkdirAll(fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	expect(t, causes, reload.CauseChange) // the directories appearing
	files.Write(t, filepath.Join(fresh, "r.yaml"), "y")
	expect(t, causes, reload.CauseChange)

	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	expect(t, causes, reload.CauseChange)
	expectNone(t, causes)
}

// TestNotRecursive keeps the flat watch: a write in a subdirectory does
// not reload.
func TestNotRecursive(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	_, causes := watch(t, dir, reload.Options{})
	files.Write(t, filepath.Join(sub, "r.yaml"), "x")
	expectNone(t, causes)
}

// TestRootSwap swaps the root symlink above the watched directory, as a
// RUNTIME_WATCH_ROOT deployment does: the swap reloads, entries beside
// the root do not, and the new tree is watched afterwards.
func TestRootSwap(t *testing.T) {
	base := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.MkdirAll(filepath.Join(base, v, "app", "config", "nested"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(base, "current")
	if err := os.Symlink("v1", root); err != nil {
		t.Fatal(err)
	}
	_, causes := watch(t, filepath.Join(root, "app", "config"), reload.Options{Recursive: true, Root: root})

	files.Write(t, filepath.Join(base, "unrelated"), "x")
	expectNone(t, causes)

	tmp := filepath.Join(base, "current.tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
	expect(t, causes, reload.CauseChange)
	expectNone(t, causes)

	// The new target is watched, its nested directories too; the old is not.
	files.Write(t, filepath.Join(base, "v1", "app", "config", "nested", "r.yaml"), "old")
	expectNone(t, causes)
	files.Write(t, filepath.Join(base, "v2", "app", "config", "nested", "r.yaml"), "new")
	expect(t, causes, reload.CauseChange)
}

// within is the bound from a change to its reload, for the
// changes the watcher sees by events (the default Debounce and Settle).
const within = 2 * time.Second

// sight is one reload: its cause, what the file read then, and when.
type sight struct {
	cause, content string
	at             time.Time
}

// watchFile starts a Watcher of dir with the production defaults (unless
// opts says otherwise) whose reloads read dir/name through dir's path.
func watchFile(t *testing.T, dir, name string, opts reload.Options) <-chan sight {
	t.Helper()
	sights := make(chan sight, 100)
	w := reload.New(dir, func(ctx context.Context, cause string) {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		sights <- sight{cause, string(b), time.Now()}
	}, opts, zaptest.NewLogger(t))
	if err := w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return sights
}

// expectContent waits (patience at most) for a reload that reads want,
// and fails if it came later than bound after since.
func expectContent(t *testing.T, sights <-chan sight, want string, since time.Time, bound time.Duration) sight {
	t.Helper()
	deadline := time.After(patience + bound)
	for {
		select {
		case s := <-sights:
			if s.content != want {
				continue // an earlier reload, of an intermediate state
			}
			took := s.at.Sub(since)
			if took > bound {
				t.Errorf("%q reloaded (%s) %v after the change, want within %v", want, s.cause, took, bound)
			}
			t.Logf("%q reloaded (%s) %v after the change", want, s.cause, took.Round(time.Millisecond))
			return s
		case <-deadline:
			t.Fatalf("no reload read %q", want)
		}
	}
}

// expectNoSight fails on a reload within quiet.
func expectNoSight(t *testing.T, sights <-chan sight) {
	t.Helper()
	select {
	case s := <-sights:
		t.Fatalf("unexpected reload (%s) reading %q", s.cause, s.content)
	case <-time.After(10 * quiet):
	}
}

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
	sights := watchFile(t, link, "rules.yaml", reload.Options{Loaded: rulesOnly})

	files.Write(t, filepath.Join(base, "unrelated"), "x") // beside the path
	expectNoSight(t, sights)

	start := time.Now()
	swapLink(t, ".worktrees/r2", link)
	expectContent(t, sights, "r2", start, within)

	files.Write(t, filepath.Join(base, ".worktrees", "r1", "rules.yaml"), "old checkout")
	if err := os.RemoveAll(filepath.Join(base, ".worktrees", "r1")); err != nil {
		t.Fatal(err)
	}
	expectNoSight(t, sights)

	start = time.Now()
	files.Replace(t, filepath.Join(base, ".worktrees", "r2", "rules.yaml"), "r2 edited")
	expectContent(t, sights, "r2 edited", start, within)
}

// TestDirectoryRemovedAndCreated removes the directory and creates it
// again (rm -rf, mkdir, write), at once and at a human's pace: the new
// rules reload within 2 s of the last write, and the new directory is
// watched.
func TestDirectoryRemovedAndCreated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause time.Duration // between the steps
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
			sights := watchFile(t, dir, "a.yaml", reload.Options{Loaded: rulesOnly})

			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.pause)
			mkdir(t, dir)
			time.Sleep(tc.pause)
			start := time.Now()
			tc.put(t, filepath.Join(dir, "a.yaml"), "v2")
			expectContent(t, sights, "v2", start, within)

			start = time.Now()
			tc.put(t, filepath.Join(dir, "a.yaml"), "v3")
			expectContent(t, sights, "v3", start, within)
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
	const check = 200 * time.Millisecond
	dir := filepath.Join(current, "rules")
	sights := watchFile(t, dir, "a.yaml", reload.Options{Check: check, Loaded: rulesOnly})
	expectNoSight(t, sights) // checks that find nothing reload nothing

	start := time.Now()
	swapLink(t, "v2", current)
	if s := expectContent(t, sights, "v2", start, check+within); s.cause != reload.CauseCheck {
		t.Errorf("reloaded by %q, want %q", s.cause, reload.CauseCheck)
	}
	start = time.Now()
	files.Replace(t, filepath.Join(base, "v2", "rules", "a.yaml"), "v2 edited")
	if s := expectContent(t, sights, "v2 edited", start, within); s.cause != reload.CauseChange {
		t.Errorf("the new directory's edit reloaded by %q, want %q: not watched", s.cause, reload.CauseChange)
	}
}

// TestContentCheckFindsUnreportedChanges: rules that change with no event
// (here a Fingerprint that changes once) reload once by the check.
func TestContentCheckFindsUnreportedChanges(t *testing.T) {
	var version atomic.Int32
	_, causes := watch(t, t.TempDir(), reload.Options{Check: 50 * time.Millisecond,
		Fingerprint: func() (string, error) { return string(rune('a' + version.Load())), nil }})
	expectNone(t, causes)
	version.Add(1)
	expect(t, causes, reload.CauseCheck)
	expectNone(t, causes)
}
