// Package top finds, per rule, the identifiers (descriptor values) with the
// most hits and with the most over-limit hits: a bounded heavy-hitters
// summary (Space-Saving) per rule and ranking, decayed exponentially, fed
// by every decision without allocating.
package top

import (
	"cmp"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/clock"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// Defaults of Options.
const (
	DefaultKeys   = 100
	DefaultWindow = 5 * time.Minute
)

// LogEvery is the least time between two log lines of one rule.
const LogEvery = time.Minute

// logTop is how many identifiers a log line names.
const logTop = 5

// Options configure a Tracker.
type Options struct {
	// Keys bounds the identifiers kept per rule and ranking (default
	// DefaultKeys); whatever the number of identifiers, a rule holds at
	// most Keys (rounded up to a multiple of its shards, at most 8) of each.
	Keys int
	// Window is the decay's time constant (default DefaultWindow): a hit
	// counts e^(-age/Window), so that at a steady rate a count is the
	// hits of one Window.
	Window time.Duration
	// LogTopLimited logs, at most once per LogEvery per rule, the rule's top
	// over-limit identifiers when it limited any.
	LogTopLimited bool
	Log           *zap.Logger // nil: no log lines
	Clock         Clock       // the decay's clock, and Run's (default: the wall clock)
}

// Clock is the time a Tracker reads and waits on.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Tracker keeps the top identifiers of every rule in force. It is an
// rls.Observer and a rules load observer; its methods are safe for
// concurrent use, and Decided neither blocks for long nor allocates once a
// rule's summaries exist.
type Tracker struct {
	o      Options
	window float64 // s

	rules atomic.Pointer[map[*descriptors.Limit]*rule]
	clock atomic.Pointer[tick]

	mu     sync.Mutex       // serialises loads and syncs
	byPath map[string]*rule // the rules in force, by domain and path
}

// tick is the decay's clock, read once a second by Sync: hits at now
// weigh weight, counts being held relative to the landmark epoch.
type tick struct {
	epoch  int64 // Unix s
	now    float64
	weight float64 // e^((now-epoch)/window)
}

// rule is one limit's summaries.
type rule struct {
	domain, path, source string
	levels               []descriptors.Level
	vars                 []bool // vars[j]: level j's value comes from the request
	shadow               bool
	hits, over           atomic.Pointer[summary] // made on first use
	limited              atomic.Bool             // over-limit hits since the last log line
	logged               float64                 // when its last log line was written, under Tracker.mu
}

// New returns a Tracker with no rules; it starts no goroutine.
func New(o Options) *Tracker {
	o.Keys, o.Window = cmp.Or(max(o.Keys, 0), DefaultKeys), cmp.Or(max(o.Window, 0), DefaultWindow)
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	t := &Tracker{o: o, window: o.Window.Seconds(), byPath: map[string]*rule{}}
	t.advance()
	return t
}

// Decided counts the hits of each status whose limit is a rule in force,
// and its over-limit hits (shadowed ones included) apart. Refunds,
// unlimited rules and request overrides are not counted.
func (t *Tracker) Decided(_ string, req limiter.View, res *limiter.Response, _ time.Duration) {
	p := t.rules.Load()
	if p == nil || req == nil {
		return
	}
	idx, tk := *p, t.clock.Load()
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if st.Limit == nil || st.Hits == 0 || st.Refund || i >= req.Len() {
			continue
		}
		r := idx[st.Limit]
		if r == nil {
			continue
		}
		id := ident{view: req, i: i, vars: r.vars}
		h := id.hash()
		w := float64(st.Hits) * tk.weight
		t.summary(&r.hits).add(h, w, tk.epoch, id)
		if st.Code == limiter.OverLimit || st.Shadowed {
			t.summary(&r.over).add(h, w, tk.epoch, id)
			if !r.limited.Load() {
				r.limited.Store(true)
			}
		}
	}
}

// Failed counts nothing: a failed request has no decision.
func (t *Tracker) Failed(string, error, time.Duration) {}

// GlobalShadowed counts nothing: the statuses told already.
func (t *Tracker) GlobalShadowed() {}

// summary returns *p, made first if need be.
func (t *Tracker) summary(p *atomic.Pointer[summary]) *summary {
	if s := p.Load(); s != nil {
		return s
	}
	s := newSummary(t.o.Keys, t.window)
	if p.CompareAndSwap(nil, s) {
		return s
	}
	return p.Load()
}

// Loaded takes in the rules of a load that changed them: a rule whose
// domain and path stay keeps its summaries, the others' are dropped.
func (t *Tracker) Loaded(r *rules.Loaded, changed bool) {
	if !changed {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	limits := r.Set.Limits()
	idx := make(map[*descriptors.Limit]*rule, len(limits))
	byPath := make(map[string]*rule, len(limits))
	for _, l := range limits {
		if l.Unlimited {
			continue
		}
		if l.Joint != nil && l.Index > 0 { // one rule of several limits: its first's
			idx[l] = idx[l.Joint[0]]
			continue
		}
		nr := newRule(l)
		k := nr.domain + "\x00" + nr.path
		if old := t.byPath[k]; old != nil {
			nr.hits.Store(old.hits.Load())
			nr.over.Store(old.over.Load())
			nr.logged = old.logged
		}
		idx[l], byPath[k] = nr, nr
	}
	t.byPath = byPath
	t.rules.Store(&idx)
}

// LoadFailed changes nothing: the rules in force stay.
func (t *Tracker) LoadFailed() {}

func newRule(l *descriptors.Limit) *rule {
	r := &rule{domain: DomainOf(l), path: l.Path, source: l.Source, levels: l.Levels, shadow: l.ShadowMode,
		vars: make([]bool, len(l.Levels))}
	for j, lv := range l.Levels {
		r.vars[j] = lv.Value == "" || descriptors.IsWildcard(lv.Value)
	}
	return r
}

// DomainOf returns the domain of a configured limit: its path less its
// levels, ".key" or ".key_value" each.
func DomainOf(l *descriptors.Limit) string {
	n := 0
	for _, lv := range l.Levels {
		n += 1 + len(lv.Key)
		if lv.Value != "" {
			n += 1 + len(lv.Value)
		}
	}
	return l.Path[:max(len(l.Path)-n, 0)]
}

// Run calls Sync every second until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.o.Clock.After(time.Second):
			t.Sync()
		}
	}
}

// Sync reads the clock, which weighs the hits decided until the next Sync,
// and writes the log lines that are due.
func (t *Tracker) Sync() {
	tk := t.advance()
	if !t.o.LogTopLimited {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.byPath {
		if !r.limited.Load() || (r.logged != 0 && tk.now-r.logged < LogEvery.Seconds()) {
			continue
		}
		r.limited.Store(false)
		r.logged = tk.now
		rk := t.ranking(r, ByOverLimit, logTop, tk)
		named := make([]string, len(rk.Entries))
		for i, e := range rk.Entries {
			named[i] = e.String()
		}
		t.o.Log.Info("top over-limit identifiers", zap.String("domain", r.domain), zap.String("rule", r.path),
			zap.Strings("top", named), zap.String("window", t.o.Window.String()))
	}
}

// advance moves the clock to now, and the landmark to now once it is a
// Window old, so that weights stay below e.
func (t *Tracker) advance() *tick {
	now := float64(t.o.Clock.Now().UnixNano()) / 1e9
	prev := t.clock.Load()
	epoch := int64(now)
	if prev != nil && now-float64(prev.epoch) < t.window {
		epoch = prev.epoch
	}
	tk := &tick{epoch: epoch, now: now, weight: math.Exp((now - float64(epoch)) / t.window)}
	t.clock.Store(tk)
	return tk
}
