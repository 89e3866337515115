// Package reload watches a rules directory and reloads it when it changes.
package reload

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Defaults of Options.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultMaxDelay = time.Second
	DefaultRewatch  = time.Second
	DefaultSettle   = time.Second
	DefaultCheck    = 10 * time.Second
)

// Causes passed to a Func.
const (
	// CauseChange is a change in the directory, after the debounce.
	CauseChange = "change"
	// CauseTrigger is an explicit Trigger, such as SIGHUP.
	CauseTrigger = "trigger"
	// CauseRewatch follows the directory coming back after it was removed
	// or renamed.
	CauseRewatch = "rewatch"
	// CauseCheck is a change found by the periodic content check
	// (Options.Check) that no event reported.
	CauseCheck = "check"
)

// Func reloads the rules. The Watcher calls it on its own goroutine, never
// twice at once, and does not interpret the outcome: Func logs and counts
// its own failures. ctx ends when the Watcher closes.
type Func func(ctx context.Context, cause string)

// Options tune a Watcher. Zero values take the defaults.
type Options struct {
	// Debounce is the quiet time after the last change before a reload,
	// so that a burst of events (an editor's save, a ConfigMap swap) makes
	// one reload.
	Debounce time.Duration
	// MaxDelay bounds how long a steady stream of events can postpone a
	// reload, counted from the first event of the burst.
	MaxDelay time.Duration
	// Rewatch is how often to try to watch the directory again after it
	// was removed or renamed.
	Rewatch time.Duration
	// Settle is how long the directory must stay unchanged after a file
	// was written in place before a reload (see Watcher).
	Settle time.Duration
	// Loaded reports whether the directory entry name (a base name) is
	// one the Func loads; writes to other entries, such as the temporary
	// file of an atomic rename, need not settle. Default: every entry.
	Loaded func(name string) bool
	// Fingerprint returns the state of the files the Func loads; equal
	// values mean unchanged files. Default: a SHA-256 of the names and
	// contents of the directory's regular files, symlinks followed.
	Fingerprint func() (string, error)
	// Recursive also watches the directory's subdirectories at any depth,
	// those created later included. Symlinks to directories are not
	// followed, and names starting with ".." (a Kubernetes ConfigMap's
	// timestamped directories, whose swaps show in the directory itself)
	// are not watched.
	Recursive bool
	// Root, when not empty, is a path above the directory whose
	// replacement also reloads: a symlink swapped over it, as
	// envoyproxy/ratelimit's RUNTIME_WATCH_ROOT expects of its
	// RUNTIME_ROOT. The directory is watched again through the new target
	// before the reload. (The directory's own path is always followed.)
	Root string
	// Check is how often the Watcher compares the Fingerprint, and the
	// directory its path leads to, with those at the last reload, and
	// reloads (CauseCheck) when either changed: a backstop for changes no
	// event reported (a swap above the directory without Root, a network
	// file system, lost events). Default DefaultCheck; negative: never.
	Check time.Duration
}

// Watcher calls a Func when a directory's entries change: writes,
// creates, removes and renames of any entry, including a Kubernetes
// ConfigMap's "..data" symlink swap. It watches the directory, not the
// files, so that files replaced by rename or symlink swap stay watched.
//
// It also follows the directory's path: it watches the parent directory
// for the path's own entry, so that the path swapped to another directory
// (git-sync's layout: the path is a symlink, replaced atomically by one to
// a new checkout), or the directory removed and created again, is watched
// again and reloads. When the directory is gone it is looked for every
// Rewatch, and at once when its parent reports it back.
//
// Changes no event reports (the targets of symlinks that point
// elsewhere, a swap higher up the path) are found by the content check
// every Check, or reloaded by Trigger.
//
// Atomic replacements (a file created or renamed into place, a removal, a
// symlink swap) reload after Debounce of quiet, at most MaxDelay after the
// first event of a burst. A write in place to a loaded file may be one of
// several pieces, so a burst that has one reloads only once the directory
// has been quiet for Debounce and then kept the same Fingerprint for
// Settle: a file written in two pieces less than Settle apart is never
// loaded half-written. Such a burst is not bounded by MaxDelay: files
// written without pause never reload (Trigger still does).
//
// New starts nothing; Open starts watching; Close stops. A Watcher is not
// reusable after Close.
type Watcher struct {
	dir  string
	fn   Func
	opts Options
	log  *zap.Logger
	kick chan struct{}

	root    string              // Options.Root, cleaned; "" without
	parents map[string]struct{} // parent directories watched for the path's entries (follow.go)
	subs    map[string]struct{} // subdirectories watched (Recursive)
	dirInfo os.FileInfo         // the directory watched, to tell when the path leads elsewhere

	fsw    *fsnotify.Watcher
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Watcher of dir that calls fn.
func New(dir string, fn Func, opts Options, log *zap.Logger) *Watcher {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = DefaultMaxDelay
	}
	if opts.Rewatch <= 0 {
		opts.Rewatch = DefaultRewatch
	}
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Check == 0 {
		opts.Check = DefaultCheck
	}
	dir = filepath.Clean(dir)
	if opts.Loaded == nil {
		opts.Loaded = func(string) bool { return true }
	}
	if opts.Fingerprint == nil {
		opts.Fingerprint = func() (string, error) { return fingerprint(dir) }
	}
	w := &Watcher{
		dir:     dir,
		fn:      fn,
		opts:    opts,
		log:     log,
		kick:    make(chan struct{}, 1),
		parents: map[string]struct{}{},
		subs:    map[string]struct{}{},
	}
	if opts.Root != "" {
		w.root = filepath.Clean(opts.Root)
	}
	return w
}

// Open starts watching. It returns an error, and watches nothing, when the
// directory cannot be watched. The watch lasts until Close or until ctx
// ends.
func (w *Watcher) Open(ctx context.Context) error {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.dir, err)
	}
	if err := fsw.Add(w.dir); err != nil {
		_ = fsw.Close()
		return fmt.Errorf("watch %s: %w", w.dir, err)
	}
	w.fsw = fsw
	w.dirInfo, _ = os.Stat(w.dir)
	if err := w.watchParents(); err != nil {
		_ = fsw.Close()
		return err
	}
	w.watchSubdirs(w.dir)
	ctx, w.cancel = context.WithCancel(ctx)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run(ctx)
	}()
	return nil
}

// Trigger asks for a reload now, without debounce. It does not wait for
// the reload; triggers made while one is pending make one reload. It is
// safe for concurrent use, and does nothing after Close.
func (w *Watcher) Trigger() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Close stops watching and waits for a reload in progress to finish. It
// is idempotent and safe to call when Open failed or was not called.
func (w *Watcher) Close() error {
	if w.cancel == nil {
		return nil
	}
	w.cancel()
	w.wg.Wait()
	err := w.fsw.Close()
	if errors.Is(err, fsnotify.ErrClosed) {
		return nil
	}
	return err
}

// relevant reports whether ev may change what the directory loads. Chmod
// alone does not (on Linux it also accompanies removals, which come with
// their own Remove event).
func relevant(ev fsnotify.Event) bool {
	return ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
}

// lost reports whether ev removed the directory itself (reported by its
// own watch or by its parent's).
func (w *Watcher) lost(ev fsnotify.Event) bool {
	return filepath.Clean(ev.Name) == w.dir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename))
}

// state is the content check's view of the rules: the Fingerprint, or the
// error that prevented it.
func (w *Watcher) state() string {
	fp, err := w.opts.Fingerprint()
	if err != nil {
		return "error: " + err.Error()
	}
	return fp
}

// fingerprint is the default Options.Fingerprint: a SHA-256 over the names
// and contents of dir's regular files (symlinks followed), in directory
// order, each length-prefixed.
func fingerprint(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	var n [8]byte
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // gone since ReadDir, dangling, or not a file
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		for _, part := range [][]byte{[]byte(e.Name()), b} {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
