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
	"strings"
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
	DefaultSettle   = 2 * time.Second
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
	// Root, when not empty, is a path, at or above the directory, whose
	// replacement also reloads: a symlink swapped over it, as
	// envoyproxy/ratelimit's RUNTIME_WATCH_ROOT expects of its
	// RUNTIME_ROOT. The directory is watched again through the new target
	// before the reload.
	Root string
}

// Watcher calls a Func when a directory's entries change: writes,
// creates, removes and renames of any entry, including a Kubernetes
// ConfigMap's "..data" symlink swap. It watches the directory, not the
// files, so that files replaced by rename or symlink swap stay watched.
// Changes to files outside the directory (the targets of symlinks that
// point elsewhere) are not seen; Trigger covers those.
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

	root, rootParent string              // Options.Root and its directory; "" without
	subs             map[string]struct{} // subdirectories watched (Recursive)

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
	dir = filepath.Clean(dir)
	if opts.Loaded == nil {
		opts.Loaded = func(string) bool { return true }
	}
	if opts.Fingerprint == nil {
		opts.Fingerprint = func() (string, error) { return fingerprint(dir) }
	}
	w := &Watcher{
		dir:  dir,
		fn:   fn,
		opts: opts,
		log:  log,
		kick: make(chan struct{}, 1),
		subs: map[string]struct{}{},
	}
	if opts.Root != "" {
		w.root = filepath.Clean(opts.Root)
		w.rootParent = filepath.Dir(w.root)
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
	if w.root != "" {
		if err := fsw.Add(w.rootParent); err != nil {
			_ = fsw.Close()
			return fmt.Errorf("watch %s: %w", w.rootParent, err)
		}
	}
	w.fsw = fsw
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

// run is the watch loop: it debounces events into calls of fn.
func (w *Watcher) run(ctx context.Context) {
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var (
		burst   time.Time    // first event of the pending burst; zero if none
		inPlace bool         // the pending burst wrote a loaded file in place
		settled string       // fingerprint at the start of the settle time
		settle  bool         // settled is set: the settle time runs
		rewatch *time.Ticker // non-nil while the directory is not watched
		retry   <-chan time.Time
	)
	defer func() {
		if rewatch != nil {
			rewatch.Stop()
		}
	}()
	schedule := func() {
		now := time.Now()
		if burst.IsZero() {
			burst = now
		}
		if inPlace {
			settle = false
			debounce.Reset(w.opts.Debounce)
			return
		}
		debounce.Reset(max(0, min(w.opts.Debounce, w.opts.MaxDelay-now.Sub(burst))))
	}
	rootSwapped := false
	reload := func(cause string) {
		debounce.Stop()
		burst, inPlace, settle = time.Time{}, false, false
		if rootSwapped && rewatch == nil {
			rootSwapped = false
			w.rewatchTree()
		}
		w.fn(ctx, cause)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if !relevant(ev) {
				continue
			}
			if w.root != "" && filepath.Dir(ev.Name) == w.rootParent && !w.watched(w.rootParent) {
				if filepath.Clean(ev.Name) != w.root {
					continue // another entry beside the root
				}
				rootSwapped = true
			}
			w.follow(ev)
			if w.lost(ev) && rewatch == nil {
				w.log.Warn("rules directory went away; watching for it to come back", zap.String("dir", w.dir), zap.Stringer("event", ev.Op))
				rewatch = time.NewTicker(w.opts.Rewatch)
				retry = rewatch.C
			}
			if ev.Has(fsnotify.Write) && w.opts.Loaded(filepath.Base(ev.Name)) && !inPlace {
				inPlace = true
				w.log.Debug("rules file written in place; reloading once the directory settles",
					zap.String("file", ev.Name), zap.Duration("settle", w.opts.Settle))
			}
			schedule()
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.log.Warn("watching rules directory", zap.String("dir", w.dir), zap.Error(err))
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				inPlace = true // events were lost, writes maybe: look again once settled
				schedule()
			}
		case <-w.kick:
			reload(CauseTrigger)
		case <-debounce.C:
			if !inPlace {
				reload(CauseChange)
				continue
			}
			fp, err := w.opts.Fingerprint()
			if err != nil || (settle && fp == settled) {
				reload(CauseChange) // on error, the load reports what is wrong
				continue
			}
			settled, settle = fp, true
			debounce.Reset(w.opts.Settle)
		case <-retry:
			if err := w.fsw.Add(w.dir); err != nil {
				continue
			}
			rewatch.Stop()
			rewatch, retry = nil, nil
			w.clearSubdirs()
			w.watchSubdirs(w.dir)
			w.log.Info("rules directory is back", zap.String("dir", w.dir))
			reload(CauseRewatch)
		}
	}
}

// relevant reports whether ev may change what the directory loads. Chmod
// alone does not (on Linux it also accompanies removals, which come with
// their own Remove event).
func relevant(ev fsnotify.Event) bool {
	return ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
}

// lost reports whether ev removed the watch on the directory itself.
func (w *Watcher) lost(ev fsnotify.Event) bool {
	return filepath.Clean(ev.Name) == w.dir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename))
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

// watched reports whether dir is the directory or one of its watched
// subdirectories.
func (w *Watcher) watched(dir string) bool {
	if dir == w.dir {
		return true
	}
	_, ok := w.subs[dir]
	return ok
}

// follow keeps the watches of a Recursive Watcher in step with ev: a
// directory created is watched with its subdirectories, one removed or
// renamed away is forgotten.
func (w *Watcher) follow(ev fsnotify.Event) {
	if !w.opts.Recursive {
		return
	}
	name := filepath.Clean(ev.Name)
	if _, ok := w.subs[name]; ok && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
		w.forget(name)
	}
	if ev.Has(fsnotify.Create) && w.watched(filepath.Dir(name)) && watchable(name) {
		w.add(name)
		w.watchSubdirs(name)
	}
}

// watchSubdirs watches the subdirectories of dir, at any depth, when the
// Watcher is Recursive. Errors (a directory removed meanwhile, inotify
// watches exhausted) are logged: the rest stays watched.
func (w *Watcher) watchSubdirs(dir string) {
	if !w.opts.Recursive {
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		w.log.Warn("watching rules subdirectories", zap.String("dir", dir), zap.Error(err))
		return
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if !e.IsDir() || strings.HasPrefix(e.Name(), "..") {
			continue
		}
		w.add(path)
		w.watchSubdirs(path)
	}
}

// add watches the subdirectory path.
func (w *Watcher) add(path string) {
	if _, ok := w.subs[path]; ok {
		return
	}
	if err := w.fsw.Add(path); err != nil {
		w.log.Warn("watching a rules subdirectory", zap.String("dir", path), zap.Error(err))
		return
	}
	w.subs[path] = struct{}{}
}

// forget stops watching the subdirectory path and those below it.
func (w *Watcher) forget(path string) {
	for sub := range w.subs {
		if sub == path || strings.HasPrefix(sub, path+string(filepath.Separator)) {
			_ = w.fsw.Remove(sub) // gone with its directory, most likely
			delete(w.subs, sub)
		}
	}
}

func (w *Watcher) clearSubdirs() {
	for sub := range w.subs {
		_ = w.fsw.Remove(sub)
		delete(w.subs, sub)
	}
}

// rewatchTree watches the directory and its subdirectories again by path,
// after the root above them was swapped for another target.
func (w *Watcher) rewatchTree() {
	w.clearSubdirs()
	_ = w.fsw.Remove(w.dir)
	if err := w.fsw.Add(w.dir); err != nil {
		w.log.Warn("watching the rules directory after its root changed", zap.String("dir", w.dir), zap.Error(err))
		return
	}
	w.watchSubdirs(w.dir)
}

// watchable reports whether path is a directory (not a symlink to one)
// that a Recursive Watcher watches.
func watchable(path string) bool {
	if strings.HasPrefix(filepath.Base(path), "..") {
		return false
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}
