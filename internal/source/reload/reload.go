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

	"github.com/fastlimit/fastlimit/pkg/clock"
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
	CauseChange  = "change"  // a change in the directory, after the debounce
	CauseTrigger = "trigger" // Trigger (SIGHUP)
	CauseRewatch = "rewatch" // the directory is back after it went away
	CauseCheck   = "check"   // the content check found a change no event reported
)

// Func reloads the rules, and logs and counts its own failures. It is
// called on the Watcher's goroutine, never twice at once; ctx ends when the
// Watcher closes.
type Func func(ctx context.Context, cause string)

// Options tune a Watcher. Zero values take the defaults.
type Options struct {
	Debounce time.Duration // quiet time before a reload
	MaxDelay time.Duration // longest a burst of events postpones a reload
	Rewatch  time.Duration // how often a directory gone away is looked for
	Settle   time.Duration // quiet time after a write in place (see Watcher)
	// Loaded reports whether an entry's base name is one the Func loads
	// (default: every entry); writes to other entries need not settle.
	Loaded func(name string) bool
	// Fingerprint returns the state of the loaded files (default: a SHA-256
	// of the names and contents of the directory's regular files).
	Fingerprint func() (string, error)
	// Recursive also watches subdirectories at any depth, except symlinks
	// and names starting with "..".
	Recursive bool
	// Root, when set, is a path above the directory whose replacement (a
	// symlink swap, as envoyproxy/ratelimit's RUNTIME_WATCH_ROOT) reloads.
	Root string
	// Check is how often the content check runs (default DefaultCheck;
	// negative: never).
	Check time.Duration
	// Clock times the debounce, the settle time, the looks for a directory
	// gone away and the content check (default: the wall clock).
	Clock Clock
}

// Clock is the time a Watcher reads and waits on.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) clock.Timer
}

// Watcher calls a Func when a directory's entries change (writes, creates,
// removes, renames, a ConfigMap's "..data" swap) and when its path, or
// Root, leads to another directory. Atomic replacements reload after
// Debounce of quiet, at most MaxDelay after a burst's first event; after a
// write in place to a loaded file, only once the Fingerprint has held for
// Settle. Every Check the content check, and Trigger at any time, catch
// what no event reports (docs/design.md#rules-watcher). New starts
// nothing, Open starts watching, Close stops for good.
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
	if opts.Clock == nil {
		opts.Clock = clock.Wall{}
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

// Open starts watching, until Close or the end of ctx. It fails, and
// watches nothing, when the directory cannot be watched.
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

// Trigger asks for a reload now and does not wait; triggers made while one
// is pending make one reload. It is safe for concurrent use, and does
// nothing after Close.
func (w *Watcher) Trigger() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Close stops watching and waits for a reload in progress. It is
// idempotent, and safe when Open failed or was not called.
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

// relevant reports whether ev may change what the directory loads: Chmod
// alone does not (on Linux it comes with removals, which have their own).
func relevant(ev fsnotify.Event) bool {
	return ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
}

// lost reports whether ev removed the directory itself.
func (w *Watcher) lost(ev fsnotify.Event) bool {
	return filepath.Clean(ev.Name) == w.dir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename))
}

// state is the Fingerprint, or the error that prevented it.
func (w *Watcher) state() string {
	fp, err := w.opts.Fingerprint()
	if err != nil {
		return "error: " + err.Error()
	}
	return fp
}

// fingerprint is the default Options.Fingerprint; symlinks are followed.
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
