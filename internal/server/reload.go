package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// openRules loads the first rules: from the directory, which is then
// watched, or from an xDS server with --config-type=GRPC_XDS_SOTW.
func (s *Server) openRules(ctx context.Context) error {
	if s.opts.XDS.Enabled() {
		return s.openXDS(ctx)
	}
	// Watch before the first load, so that no change goes unseen.
	layout := s.opts.Rules()
	s.reload = startReload(context.WithoutCancel(ctx), layout, s.rules.reload, s.clock, s.log.Named("reload"))
	if _, err := s.rules.load(); err != nil {
		if !errors.Is(err, rules.ErrNoFiles) {
			return fmt.Errorf("load rules from %s (%s): %w", layout.Dir, s.opts.Name("config"), err)
		}
		// An image without rules, or a ConfigMap mounted elsewhere: serve,
		// as the reference does, and say so.
		s.rules.startEmpty()
		s.log.Warn("no rules files: every request is answered OK, matching no rule, until rules files appear "+
			"(HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true keeps health failed meanwhile)",
			zap.String(logDir, layout.Dir), zap.String("setting", s.opts.Name("config")))
		return nil
	}
	cur := s.rules.Current()
	s.log.Info("rules loaded", zap.String(logDir, layout.Dir), zap.Int(logFiles, len(cur.Files)),
		zap.Int(logDomains, len(cur.Set.Domains())), zap.String(logHash, cur.Hash))
	logWarnings(s.log.Named("rules"), cur, "start")
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

// startReload starts watching the rules directory, on clk (nil: the wall
// clock), and SIGHUP; fn reloads. It returns once both are watched; Close
// stops them.
func startReload(ctx context.Context, layout settings.RulesLayout, fn reload.Func, clk reload.Clock, log *zap.Logger) *hotReload {
	ctx, cancel := context.WithCancel(ctx)
	h := &hotReload{cancel: cancel, done: make(chan struct{})}
	w := reload.New(layout.Dir, fn, reload.Options{
		Recursive:   layout.Recursive,
		Root:        layout.Root,
		Loaded:      layout.Load.IsRulesName,
		Fingerprint: func() (string, error) { return rules.FingerprintWith(layout.Dir, layout.Load) },
		Clock:       clk,
	}, log)
	if err := w.Open(ctx); err != nil {
		log.Warn("cannot watch the rules directory; SIGHUP reloads it", zap.String(logDir, layout.Dir), zap.Error(err))
	} else {
		h.watcher = w
	}
	onSIGHUP(ctx, h.done, func() {
		if h.watcher != nil {
			h.watcher.Trigger()
		} else {
			fn(ctx, reload.CauseTrigger)
		}
	})
	return h
}

// onSIGHUP calls f on each SIGHUP until ctx ends, then closes done. The
// signal is caught from when it returns (Go's default for SIGHUP is to
// exit).
func onSIGHUP(ctx context.Context, done chan<- struct{}, f func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				f()
			}
		}
	}()
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
