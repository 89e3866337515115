package reload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// followedPaths returns the directory's path and Options.Root.
func (w *Watcher) followedPaths() []string {
	paths := []string{w.dir}
	if w.root != "" && w.root != w.dir {
		paths = append(paths, w.root)
	}
	return paths
}

// watchParents watches the parent of each followed path. A parent that
// cannot be watched is an error for Root, and only logged for the directory.
func (w *Watcher) watchParents() error {
	for _, p := range w.followedPaths() {
		parent := filepath.Dir(p)
		if parent == p || w.watched(parent) {
			continue
		}
		if err := w.fsw.Add(parent); err != nil {
			if p == w.root {
				return fmt.Errorf("watch %s: %w", parent, err)
			}
			w.log.Info("cannot watch the rules directory's parent; the content check finds a swap of its path",
				zap.String("dir", parent), zap.Error(err))
			continue
		}
		w.parents[parent] = struct{}{}
	}
	return nil
}

// inParent reports whether ev comes from a parent watched by watchParents.
func (w *Watcher) inParent(ev fsnotify.Event) bool {
	dir := filepath.Dir(filepath.Clean(ev.Name))
	_, ok := w.parents[dir]
	return ok && !w.watched(dir)
}

// followed reports whether name is a followed path.
func (w *Watcher) followed(name string) bool {
	name = filepath.Clean(name)
	return name == w.dir || (w.root != "" && name == w.root)
}

// sameDir reports whether the path still leads to the directory watched.
func (w *Watcher) sameDir() bool {
	fi, err := os.Stat(w.dir)
	if err != nil {
		return false
	}
	if w.dirInfo == nil {
		w.dirInfo = fi
		return true
	}
	return os.SameFile(fi, w.dirInfo)
}

// watched reports whether dir is the directory or a watched subdirectory.
func (w *Watcher) watched(dir string) bool {
	if dir == w.dir {
		return true
	}
	_, ok := w.subs[dir]
	return ok
}

// followTree keeps a Recursive Watcher's watches in step with ev.
func (w *Watcher) followTree(ev fsnotify.Event) {
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

// watchSubdirs watches dir's subdirectories when the Watcher is Recursive;
// errors are logged, and the rest stays watched.
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

// rewatchTree watches the directory, its subdirectories and the parents
// again by path; it fails when the directory cannot be watched.
func (w *Watcher) rewatchTree() error {
	w.clearSubdirs()
	_ = w.fsw.Remove(w.dir)
	if err := w.fsw.Add(w.dir); err != nil {
		return fmt.Errorf("watch %s: %w", w.dir, err)
	}
	w.dirInfo, _ = os.Stat(w.dir)
	for parent := range w.parents {
		_ = w.fsw.Remove(parent)
		if err := w.fsw.Add(parent); err != nil {
			w.log.Warn("watching the rules directory's parent again", zap.String("dir", parent), zap.Error(err))
			delete(w.parents, parent)
		}
	}
	w.watchSubdirs(w.dir)
	return nil
}

// watchable reports whether a Recursive Watcher watches path.
func watchable(path string) bool {
	if strings.HasPrefix(filepath.Base(path), "..") {
		return false
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}
