package reload

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/clock"
)

// loop is the state of a Watcher's goroutine.
type loop struct {
	w        *Watcher
	ctx      context.Context
	debounce clock.Timer
	burst    time.Time   // first event of the pending burst; zero if none
	inPlace  bool        // the pending burst wrote a loaded file in place
	settled  string      // fingerprint at the start of the settle time
	settle   bool        // settled is set: the settle time runs
	swapped  bool        // the path leads elsewhere: watch it again before the reload
	rewatch  clock.Timer // every Rewatch while the directory is looked for; nil if not
	check    clock.Timer // every Check; nil without
	seen     string      // state at the last reload (Options.Check)
}

// run debounces events into calls of fn until ctx ends.
func (w *Watcher) run(ctx context.Context) {
	l := &loop{w: w, ctx: ctx, debounce: w.opts.Clock.NewTimer(time.Hour)}
	l.debounce.Stop()
	defer l.stop()
	if w.opts.Check > 0 {
		l.seen = w.state()
		l.check = w.opts.Clock.NewTimer(w.opts.Check)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			l.event(ev)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			l.error(err)
		case <-w.kick:
			l.reload(CauseTrigger)
		case <-l.debounce.C():
			l.debounced()
		case <-tick(l.rewatch):
			l.retry()
			if l.rewatch != nil {
				l.rewatch.Reset(w.opts.Rewatch)
			}
		case <-tick(l.check):
			l.checkNow()
			l.check.Reset(w.opts.Check)
		}
	}
}

// tick returns t's channel, nil (never ready) for a nil t.
func tick(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func (l *loop) stop() {
	for _, t := range []clock.Timer{l.debounce, l.rewatch, l.check} {
		if t != nil {
			t.Stop()
		}
	}
}

// event takes an event of the directory, a subdirectory or a parent.
func (l *loop) event(ev fsnotify.Event) {
	w := l.w
	if !relevant(ev) {
		return
	}
	if w.inParent(ev) {
		if !w.followed(ev.Name) {
			return // another entry beside the path
		}
		l.swapped = true
	}
	w.followTree(ev)
	if w.lost(ev) && l.rewatch == nil {
		w.log.Warn("rules directory went away; watching for it to come back", zap.String("dir", w.dir), zap.Stringer("event", ev.Op))
		l.rewatch = w.opts.Clock.NewTimer(w.opts.Rewatch)
	}
	if ev.Has(fsnotify.Write) && w.opts.Loaded(filepath.Base(ev.Name)) && !l.inPlace {
		l.inPlace = true
		w.log.Debug("rules file written in place; reloading once the directory settles",
			zap.String("file", ev.Name), zap.Duration("settle", w.opts.Settle))
	}
	l.schedule()
}

func (l *loop) error(err error) {
	l.w.log.Warn("watching rules directory", zap.String("dir", l.w.dir), zap.Error(err))
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		l.inPlace = true // events were lost, writes maybe: look again once settled
		l.schedule()
	}
}

// schedule (re)starts the debounce of the pending burst.
func (l *loop) schedule() {
	now := l.w.opts.Clock.Now()
	if l.burst.IsZero() {
		l.burst = now
	}
	if l.inPlace {
		l.settle = false
		l.debounce.Reset(l.w.opts.Debounce)
		return
	}
	l.debounce.Reset(max(0, min(l.w.opts.Debounce, l.w.opts.MaxDelay-now.Sub(l.burst))))
}

// debounced ends a quiet time: it reloads, or starts or ends the settle time.
func (l *loop) debounced() {
	if !l.inPlace {
		l.reload(CauseChange)
		return
	}
	fp, err := l.w.opts.Fingerprint()
	if err != nil || (l.settle && fp == l.settled) {
		l.reload(CauseChange) // on error, the load reports what is wrong
		return
	}
	l.settled, l.settle = fp, true
	l.debounce.Reset(l.w.opts.Settle)
}

// reload calls fn, after watching the directory again if it was swapped.
func (l *loop) reload(cause string) {
	l.debounce.Stop()
	l.burst, l.inPlace, l.settle = time.Time{}, false, false
	if l.swapped {
		l.swapped = false
		if err := l.w.rewatchTree(); err != nil {
			if l.rewatch == nil {
				l.w.log.Warn("rules directory cannot be watched again; looking for it", zap.String("dir", l.w.dir), zap.Error(err))
				l.rewatch = l.w.opts.Clock.NewTimer(l.w.opts.Rewatch)
			}
		} else if l.rewatch != nil {
			l.back()
		}
	}
	if l.check != nil {
		l.seen = l.w.state()
	}
	l.w.fn(l.ctx, cause)
}

// retry looks for the directory that went away, and reloads it once back.
func (l *loop) retry() {
	if err := l.w.rewatchTree(); err != nil {
		return
	}
	l.back()
	l.reload(CauseRewatch)
}

// back stops looking for the directory, watched again.
func (l *loop) back() {
	l.rewatch.Stop()
	l.rewatch = nil
	l.w.log.Info("rules directory is back", zap.String("dir", l.w.dir))
}

// checkNow is the content check, skipped while a reload is pending or the
// directory is looked for.
func (l *loop) checkNow() {
	if !l.burst.IsZero() || l.rewatch != nil {
		return
	}
	if !l.w.sameDir() {
		l.w.log.Info("rules directory path leads elsewhere; watching it again", zap.String("dir", l.w.dir))
		l.swapped = true
		l.reload(CauseCheck)
		return
	}
	if l.w.state() != l.seen {
		l.reload(CauseCheck)
	}
}
