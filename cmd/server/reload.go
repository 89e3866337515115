package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/reload"
	config "github.com/fastlimit/fastlimit/pkg/rules"
)

// Log keys of the rules loader.
const (
	logDir     = "dir"
	logHash    = "hash"
	logCause   = "cause"
	logErrors  = "errors"
	logTook    = "took"
	logFiles   = "files"
	logDomains = "domains"
	logLimits  = "limits"

	logResources = "resources"
)

// rules loads the rules directory (or takes rules from xDS) and swaps them
// into the limiter. The first load and every reload run the same pipeline:
// config.Load (or config.FromXDS), then, if the hash differs from the
// rules in force, limiter.SetRules. A failed load changes nothing. Requests in flight finish on the rules they
// started with.
type rules struct {
	layout  rulesLayout
	limiter *limiter.Limiter
	metrics *metrics
	log     *zap.Logger

	mu      sync.Mutex // serialises loads
	current atomic.Pointer[config.Loaded]
}

func newRules(layout rulesLayout, l *limiter.Limiter, m *metrics, log *zap.Logger) *rules {
	return &rules{layout: layout, limiter: l, metrics: m, log: log}
}

// load loads the directory and swaps the rules in if they changed. It
// returns whether they did; on error the rules in force stay.
func (r *rules) load() (changed bool, err error) {
	return r.swap(func() (*config.Loaded, error) { return config.LoadWith(r.layout.dir, r.layout.load) })
}

// swap compiles rules with build and swaps them in if their hash differs
// from the rules in force, as load does for the directory. Rules from
// files and from xDS take this one path.
func (r *rules) swap(build func() (*config.Loaded, error)) (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := build()
	if err != nil {
		r.metrics.loadFailed()
		return false, err
	}
	if cur := r.current.Load(); cur != nil && cur.Hash == next.Hash {
		r.metrics.loaded(cur, false)
		return false, nil
	}
	r.limiter.SetRules(next.Set)
	r.current.Store(next)
	r.metrics.loaded(next, true)
	return true, nil
}

// Current returns the rules in force, nil before the first load.
func (r *rules) Current() *config.Loaded { return r.current.Load() }

// reload is the reload.Func: it loads and logs the outcome once.
func (r *rules) reload(_ context.Context, cause string) {
	_ = r.update(cause, r.load)
}

// update runs load (load, or a swap of rules from elsewhere) and logs the
// outcome once. It returns load's error.
func (r *rules) update(cause string, load func() (bool, error)) error {
	start := time.Now()
	changed, err := load()
	took := zap.Duration(logTook, time.Since(start))
	switch {
	case err != nil:
		errs := flatten(err)
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		inForce := ""
		if cur := r.Current(); cur != nil {
			inForce = cur.Hash
		}
		r.log.Error("rules reload failed; the rules in force stay", zap.String(logCause, cause),
			zap.Strings(logErrors, msgs), zap.String(logHash, inForce), took)
	case changed:
		cur := r.Current()
		r.log.Info("rules reloaded", zap.String(logCause, cause), zap.String(logHash, cur.Hash),
			sources(cur), zap.Int(logDomains, len(cur.Set.Domains())),
			zap.Int(logLimits, len(cur.Set.Limits())), took)
	default:
		r.log.Debug("rules unchanged", zap.String(logCause, cause), took)
	}
	return err
}

// sources is the log field that counts where rules came from.
func sources(r *config.Loaded) zap.Field {
	if r.FromXDS {
		return zap.Int(logResources, len(r.Resources))
	}
	return zap.Int(logFiles, len(r.Files))
}

// openRules loads the first rules: from the directory, which is then
// watched, or from an xDS server with --config-type=GRPC_XDS_SOTW.
func (s *server) openRules(ctx context.Context) error {
	if s.opts.xds.enabled() {
		return s.openXDS(ctx)
	}
	// Watch before the first load, so that no change goes unseen.
	layout := s.opts.rules()
	s.reload = startReload(context.WithoutCancel(ctx), layout, s.rules.reload, s.log.Named("reload"))
	if _, err := s.rules.load(); err != nil {
		return fmt.Errorf("load rules from %s (%s): %w", layout.dir, s.opts.name("config"), err)
	}
	cur := s.rules.Current()
	s.log.Info("rules loaded", zap.String(logDir, layout.dir), zap.Int(logFiles, len(cur.Files)),
		zap.Int(logDomains, len(cur.Set.Domains())), zap.String(logHash, cur.Hash))
	return nil
}

// hotReload reloads the rules when their directory changes and on
// SIGHUP. If the directory cannot be watched (inotify instances exhausted,
// say), SIGHUP still reloads.
type hotReload struct {
	watcher *reload.Watcher // nil when the directory is not watched
	cancel  context.CancelFunc
	done    chan struct{}
}

// startReload starts watching the rules directory and SIGHUP; fn
// reloads. It returns once both are watched; Close stops them.
func startReload(ctx context.Context, layout rulesLayout, fn reload.Func, log *zap.Logger) *hotReload {
	ctx, cancel := context.WithCancel(ctx)
	h := &hotReload{cancel: cancel, done: make(chan struct{})}
	w := reload.New(layout.dir, fn, reload.Options{
		Recursive:   layout.recursive,
		Root:        layout.root,
		Loaded:      layout.load.IsRulesName,
		Fingerprint: func() (string, error) { return config.FingerprintWith(layout.dir, layout.load) },
	}, log)
	if err := w.Open(ctx); err != nil {
		log.Warn("cannot watch the rules directory; SIGHUP reloads it", zap.String(logDir, layout.dir), zap.Error(err))
	} else {
		h.watcher = w
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer close(h.done)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if h.watcher != nil {
					h.watcher.Trigger()
				} else {
					fn(ctx, reload.CauseTrigger)
				}
			}
		}
	}()
	return h
}

// Close stops watching; a reload in progress finishes first. It is
// idempotent.
func (h *hotReload) Close() error {
	h.cancel()
	<-h.done
	if h.watcher == nil {
		return nil
	}
	return h.watcher.Close()
}
