package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// causeOverlay is the cause logged for a change of the rules overlay.
const causeOverlay = "overlay"

// xdsSource compiles each xDS snapshot with the overlay in force
// (--rules-overlay), and the last snapshot again when the overlay file
// changes. Snapshots and overlay changes are applied one at a time.
type xdsSource struct {
	rules *ruleSource
	path  string       // the overlay file; "" without one
	clock reload.Clock // of the overlay's watch; nil: the wall clock
	log   *zap.Logger

	mu      sync.Mutex
	overlay *rules.Overlay // in force; nil without one
	last    []*anypb.Any   // the last snapshot applied; nil before the first
	watcher *reload.Watcher
}

// newXDSSource reads the overlay at path, if any: a bad one stops the start.
func newXDSSource(r *ruleSource, path string, clk reload.Clock, log *zap.Logger) (*xdsSource, error) {
	x := &xdsSource{rules: r, path: path, clock: clk, log: log}
	if path == "" {
		return x, nil
	}
	ov, err := rules.LoadOverlay(path)
	if err != nil {
		return nil, err
	}
	x.overlay = ov
	log.Info("rules overlay loaded", zap.String("file", path), zap.Int(logDomains, ov.Domains()), zap.String(logHash, ov.Hash))
	return x, nil
}

// apply compiles a snapshot with the overlay and swaps it in; its error
// NACKs the snapshot.
func (x *xdsSource) apply(res []*anypb.Any) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rules.update(causeXDS, func() (bool, error) {
		changed, err := x.rules.swap(func() (*rules.Loaded, error) { return rules.FromAnyWith(res, x.overlay) })
		if err == nil {
			x.last = res
		}
		return changed, err
	})
}

// reload reads the overlay file again and, if it changed, compiles the
// last snapshot with it; on failure the overlay and rules in force stay.
func (x *xdsSource) reload(_ context.Context, cause string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	_ = x.rules.update(cause, func() (bool, error) {
		ov, err := rules.LoadOverlay(x.path)
		if err != nil {
			x.rules.obs.LoadFailed()
			return false, fmt.Errorf("rules overlay: %w", err)
		}
		if x.overlay != nil && ov.Hash == x.overlay.Hash {
			return false, nil
		}
		if x.last == nil { // no snapshot yet: the first takes it
			x.overlay = ov
			x.log.Info("rules overlay reloaded; no rules from xDS yet", zap.String("file", x.path), zap.String(logHash, ov.Hash))
			return false, nil
		}
		changed, err := x.rules.swap(func() (*rules.Loaded, error) { return rules.FromAnyWith(x.last, ov) })
		if err == nil {
			x.overlay = ov
		}
		return changed, err
	})
}

// watch reloads the overlay when its file changes (an atomic replacement,
// a write in place, a ConfigMap's swap) until ctx ends; without an
// overlay it does nothing. If the directory cannot be watched, SIGHUP
// still reloads it.
func (x *xdsSource) watch(ctx context.Context) {
	if x.path == "" {
		return
	}
	dir, name := filepath.Split(x.path)
	if dir == "" {
		dir = "."
	}
	w := reload.New(dir, func(ctx context.Context, cause string) {
		if cause == reload.CauseChange {
			cause = causeOverlay
		}
		x.reload(ctx, cause)
	}, reload.Options{
		Loaded:      func(n string) bool { return n == name },
		Fingerprint: func() (string, error) { return fileHash(x.path) },
		Clock:       x.clock,
	}, x.log)
	if err := w.Open(ctx); err != nil {
		x.log.Warn("cannot watch the rules overlay's directory; SIGHUP reloads it", zap.String("file", x.path), zap.Error(err))
		return
	}
	x.watcher = w
}

// trigger reloads the overlay (SIGHUP); it reports false without one.
func (x *xdsSource) trigger(ctx context.Context) bool {
	switch {
	case x.path == "":
		return false
	case x.watcher != nil:
		x.watcher.Trigger()
	default:
		x.reload(ctx, reload.CauseTrigger)
	}
	return true
}

// close stops watching the overlay.
func (x *xdsSource) close() {
	if x.watcher != nil {
		_ = x.watcher.Close()
	}
}

// fileHash is the hex SHA-256 of path's content, "" if it is missing.
func fileHash(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
