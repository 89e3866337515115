package admin

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Log keys of the audit lines.
const (
	logWho         = "who"
	logAction      = "action"
	logRemote      = "remote"
	logDomain      = "domain"
	logDescriptors = "descriptors"
	logReason      = "reason"
	logSuppressed  = "suppressed"
)

// refusalEvery is how often the refusals of one reason are logged: the
// next line counts in "suppressed" those not logged since.
const refusalEvery = time.Second

// auditLog writes the audit lines: every write at warn, so that
// --log-level warn (the reference's default) keeps them, and refusals at
// warn, at most one line per reason and refusalEvery. Safe for
// concurrent use.
type auditLog struct {
	log *zap.Logger
	now func() time.Time

	mu      sync.Mutex
	refusal map[string]*refusalState // by reason
}

type refusalState struct {
	last       time.Time
	suppressed int64
}

func newAuditLog(log *zap.Logger, now func() time.Time) *auditLog {
	return &auditLog{log: log, now: now, refusal: map[string]*refusalState{}}
}

// refused logs a refused request, unless a line of its reason was
// written less than refusalEvery ago.
func (l *auditLog) refused(r *http.Request, reason string, err error) {
	l.mu.Lock()
	st := l.refusal[reason]
	if st == nil {
		st = &refusalState{}
		l.refusal[reason] = st
	}
	now := l.now()
	if !st.last.IsZero() && now.Sub(st.last) < refusalEvery {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	l.mu.Unlock()
	l.log.Warn("admin request refused", zap.String(logReason, reason), zap.String("method", r.Method),
		zap.String("path", quoted(r.URL.Path)), zap.String(logRemote, r.RemoteAddr), zap.Error(err),
		zap.Int64(logSuppressed, suppressed))
}

// wrote logs a write: who, from where, what, and the state before and
// after.
func (l *auditLog) wrote(r *http.Request, who, action string, a *CountersAnswer, hits uint64) {
	what := make([]string, len(a.Descriptors))
	before, after := make([]string, len(a.Descriptors)), make([]string, len(a.Descriptors))
	for i, c := range a.Descriptors {
		what[i] = descriptorText(c.Before.Entries)
		before[i], after[i] = stateText(&c.Before), stateText(&c.After)
	}
	fields := []zap.Field{zap.String(logAction, action), zap.String(logRemote, r.RemoteAddr), zap.String(logWho, who),
		zap.String(logDomain, quoted(a.Domain)), zap.Strings(logDescriptors, what)}
	if action == actionRefund {
		fields = append(fields, zap.Uint64("hits", hits))
	}
	l.log.Warn("admin write", append(fields, zap.Strings("before", before), zap.Strings("after", after))...)
}

// descriptorText is a descriptor for a log line, each value quoted, and
// each key quoted unless it is a plain word: key="value",key2="v,2". No
// value can make it read as another descriptor.
func descriptorText(es []Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		if plainWord(e.Key) {
			b.WriteString(e.Key)
		} else {
			b.WriteString(strconv.Quote(e.Key))
		}
		b.WriteByte('=')
		b.WriteString(strconv.Quote(e.Value))
	}
	return b.String()
}

// plainWord reports whether s is letters, digits and _ . - alone.
func plainWord(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// quoted is s as is when it is plain text, quoted otherwise: a log line
// shows what a client sent without its control characters.
func quoted(s string) string {
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == '"' || c == '\\' || c >= 0x80 && !strconv.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}

// stateText is a descriptor's state for a log line: its rule and what
// is left, "d.user: count 0, 5/5 left" (tokens for a bucket).
func stateText(e *Explained) string {
	if e.Rule == nil {
		return "no rule"
	}
	switch {
	case e.Remaining != nil:
		return e.Rule.Path + ": count " + strconv.FormatInt(*e.Count, 10) + ", " +
			strconv.FormatUint(uint64(*e.Remaining), 10) + "/" + strconv.FormatUint(uint64(e.Rule.RequestsPerUnit), 10) + " left"
	case e.Tokens != nil:
		return e.Rule.Path + ": " + strconv.FormatUint(uint64(*e.Tokens), 10) + " tokens"
	}
	return e.Rule.Path + ": unlimited"
}
