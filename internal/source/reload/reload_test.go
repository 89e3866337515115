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
