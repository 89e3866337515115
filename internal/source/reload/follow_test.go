package reload_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

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
