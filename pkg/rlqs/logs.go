package rlqs

import (
	"sync"
	"sync/atomic"
	"time"
)

// The service's log lines a client can cause are bounded here: ids
// remembered as logged, lines a second.

// logDue reports whether a line last written at *at (Unix ns) may be
// written again, a second later, and if so notes now.
func logDue(at *atomic.Int64) bool {
	now := time.Now().UnixNano()
	last := at.Load()
	return now-last >= int64(time.Second) && at.CompareAndSwap(last, now)
}

// maxLoggedIDs bounds the unmatched bucket ids remembered as logged.
const maxLoggedIDs = 4096

// maxIDLines bounds the unmatched bucket ids logged a second: a client
// naming new ids in every report cannot flood the log.
const maxIDLines = 10

// lineBudget lets at most max lines through in a second of the wall
// clock, and counts those held back.
type lineBudget struct {
	max  int
	mu   sync.Mutex
	sec  int64 // the second counted, Unix
	n    int   // lines let through in it
	held int   // lines held back since the last one let through
}

// take reports whether a line may be written at now and, if so, how many
// were held back since the last that was.
func (b *lineBudget) take(now time.Time) (ok bool, held int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sec := now.Unix(); sec != b.sec {
		b.sec, b.n = sec, 0
	}
	if b.n >= b.max {
		b.held++
		return false, 0
	}
	b.n++
	held, b.held = b.held, 0
	return true, held
}

// onceSet remembers up to max keys, then forgets them all and starts
// again: each key is reported new at most once per filling.
type onceSet struct {
	max  int
	mu   sync.Mutex
	seen map[string]struct{}
}

// add reports whether key is new, remembering it.
func (o *onceSet) add(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[key]; ok {
		return false
	}
	if o.seen == nil || len(o.seen) >= o.max {
		o.seen = make(map[string]struct{}, min(o.max, 64))
	}
	o.seen[key] = struct{}{}
	return true
}
