package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
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
	logDomain  = "domain"
	logLimits  = "limits"
	// logFailedAt is when the failed reload before a good one ran.
	logFailedAt = "failed_reload_at"

	logResources   = "resources"
	logWarningsKey = "warnings"
)

// ruleSource loads the rules directory (or takes rules from xDS) and
// swaps them into the limiter. The first load and every reload run the
// same pipeline: rules.LoadWith (or rules.FromXDS), then, if the hash
// differs from the rules in force, limiter.SetRules. A failed load changes
// nothing. Requests in flight finish on the rules they started with.
type ruleSource struct {
	layout  settings.RulesLayout
	limiter *limiter.Limiter
	obs     loadObserver
	log     *zap.Logger

	// onRemoved, if set, is told of the domains a load removed.
	onRemoved func(domains []string)

	mu      sync.Mutex // serialises loads
	current atomic.Pointer[rules.Loaded]
	removed []string // the domains the last swap removed, for update to log
	status  atomic.Pointer[admin.ReloadStatus]
}

// loadObserver is told of every load of the rules: metrics.Metrics and
// refstats.Stats count them.
type loadObserver interface {
	// Loaded is told of a successful load, changed or not.
	Loaded(r *rules.Loaded, changed bool)
	// LoadFailed is told of a failed load; the rules in force stay.
	LoadFailed()
}

// loadObservers tells each of its observers.
type loadObservers []loadObserver

func (os loadObservers) Loaded(r *rules.Loaded, changed bool) {
	for _, o := range os {
		o.Loaded(r, changed)
	}
}

func (os loadObservers) LoadFailed() {
	for _, o := range os {
		o.LoadFailed()
	}
}

func newRuleSource(layout settings.RulesLayout, l *limiter.Limiter, obs loadObserver, log *zap.Logger) *ruleSource {
	return &ruleSource{layout: layout, limiter: l, obs: obs, log: log}
}

// load loads the directory and swaps the rules in if they changed. It
// returns whether they did; on error the rules in force stay.
func (r *ruleSource) load() (changed bool, err error) {
	return r.swap(func() (*rules.Loaded, error) { return rules.LoadWith(r.layout.Dir, r.layout.Load) })
}

// swap compiles rules with build and swaps them in if their hash differs
// from the rules in force, as load does for the directory. Rules from
// files and from xDS take this one path.
func (r *ruleSource) swap(build func() (*rules.Loaded, error)) (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := build()
	if err != nil {
		r.obs.LoadFailed()
		return false, err
	}
	cur := r.current.Load()
	if cur != nil && cur.Hash == next.Hash {
		r.obs.Loaded(cur, false)
		return false, nil
	}
	r.limiter.SetRules(next.Set)
	r.current.Store(next)
	r.obs.Loaded(next, true)
	r.removed = removedDomains(cur, next)
	if len(r.removed) > 0 && r.onRemoved != nil {
		r.onRemoved(r.removed)
	}
	return true, nil
}

// startEmpty puts rules without domains in force, for a start on a rules
// directory without rules files; the watcher loads the files that appear.
func (r *ruleSource) startEmpty() {
	_, _ = r.swap(func() (*rules.Loaded, error) {
		set, err := descriptors.NewSet(nil)
		if err != nil {
			return nil, err
		}
		return &rules.Loaded{Set: set, Hash: emptyRulesHash}, nil
	})
}

// emptyRulesHash is the hash of no rules files: SHA-256 of nothing.
const emptyRulesHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// removedDomains returns the domains of prev that next lacks.
func removedDomains(prev, next *rules.Loaded) []string {
	if prev == nil {
		return nil
	}
	var gone []string
	for _, d := range prev.Set.Domains() {
		if next.Set.Domain(d) == nil {
			gone = append(gone, d)
		}
	}
	return gone
}

// Current returns the rules in force, nil before the first load.
func (r *ruleSource) Current() *rules.Loaded { return r.current.Load() }

// Reload returns how the loads went, nil before any reload.
func (r *ruleSource) Reload() *admin.ReloadStatus { return r.status.Load() }

// reload is the reload.Func: it loads and logs the outcome once.
func (r *ruleSource) reload(_ context.Context, cause string) {
	_ = r.update(cause, r.load)
}

// update runs load (load, or a swap of rules from elsewhere) and logs the
// outcome once. It returns load's error.
func (r *ruleSource) update(cause string, load func() (bool, error)) error {
	start := time.Now()
	changed, err := load()
	took := zap.Duration(logTook, time.Since(start))
	prev := r.status.Load()
	if prev == nil {
		prev = &admin.ReloadStatus{}
	}
	next := *prev
	next.At, next.Failing = start, err != nil
	switch {
	case err != nil:
		errs := rules.Flatten(err)
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		next.ErrorAt, next.Errors = start, msgs
		inForce := ""
		if cur := r.Current(); cur != nil {
			inForce = cur.Hash
		}
		r.log.Error("rules reload failed; the rules in force stay", zap.String(logCause, cause),
			zap.Strings(logErrors, msgs), zap.String(logHash, inForce), took)
	case changed:
		cur := r.Current()
		fields := []zap.Field{zap.String(logCause, cause), zap.String(logHash, cur.Hash),
			sources(cur), zap.Int(logDomains, len(cur.Set.Domains())), zap.Int(logLimits, len(cur.Set.Limits())), took}
		if prev.Failing {
			fields = append(fields, zap.Time(logFailedAt, prev.ErrorAt))
		}
		r.log.Info("rules reloaded", fields...)
		logWarnings(r.log, cur, cause)
		r.mu.Lock()
		removed := r.removed
		r.mu.Unlock()
		for _, d := range removed {
			r.log.Warn("domain removed from the rules: its requests are no longer limited", zap.String(logDomain, d),
				zap.String(logCause, cause), zap.String(logHash, cur.Hash))
		}
	case prev.Failing:
		r.log.Info("rules reloaded after a failed reload: the rules in force are good and unchanged",
			zap.String(logCause, cause), zap.String(logHash, r.Current().Hash), zap.Time(logFailedAt, prev.ErrorAt), took)
	default:
		r.log.Debug("rules unchanged", zap.String(logCause, cause), took)
	}
	r.status.Store(&next)
	return err
}

// logWarnings logs what loaded but is ignored or may be a mistake, once
// per rules that differ.
func logWarnings(log *zap.Logger, r *rules.Loaded, cause string) {
	if len(r.Warnings) == 0 {
		return
	}
	ws := make([]string, len(r.Warnings))
	for i, w := range r.Warnings {
		ws[i] = w.Error()
	}
	log.Warn("rules loaded with warnings", zap.String(logCause, cause), zap.Strings(logWarningsKey, ws), zap.String(logHash, r.Hash))
}

// sources is the log field that counts where rules came from.
func sources(r *rules.Loaded) zap.Field {
	if r.FromXDS {
		return zap.Int(logResources, len(r.Resources))
	}
	return zap.Int(logFiles, len(r.Files))
}
