package faultproxy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Match selects what a fault applies to; its zero value matches every
// command, every time. Faults are decided when the proxy reads a command,
// so a fault added later does not apply to that command's reply. A reply
// that answers no command (a push, a pub/sub message) is matched, when it
// arrives, by faults whose Match names no command.
type Match struct {
	// Commands lists names in any case ("EVALSHA"; "CLUSTER SLOTS" names a
	// subcommand); empty matches every command.
	Commands []string
	// FirstCommands > 0 matches only a connection's first FirstCommands
	// commands: its handshake (AUTH, HELLO, SELECT...).
	FirstCommands int
	// Func, if set, must also return true; it runs on the proxy's
	// goroutines and must not block.
	Func      func(*Command) bool
	Conn      int64 // != 0: only the connection with this ID (Proxy.Conns)
	NextConns int   // > 0: only the next connections accepted
	Skip      int   // matches let through before the fault applies
	Times     int   // > 0: applies that many times, then is spent (Rule.Done)
}

// Nth matches, once, the nth command (from 1) named by commands (any, if
// none), counted across the connections the fault applies to.
func Nth(n int, commands ...string) Match {
	return Match{Commands: commands, Skip: max(n-1, 0), Times: 1}
}

// commandFree reports whether m can match a reply that answers no command.
func (m *Match) commandFree() bool {
	return len(m.Commands) == 0 && m.FirstCommands == 0 && m.Func == nil
}

func (m *Match) matchCommand(c *Command) bool {
	if c == nil {
		return m.commandFree()
	}
	if m.FirstCommands > 0 && c.Index > m.FirstCommands {
		return false
	}
	if len(m.Commands) > 0 {
		found := false
		for _, name := range m.Commands {
			if c.Is(name) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return m.Func == nil || m.Func(c)
}

// A Fault is one of this package's fault types, for Proxy.Add or Set.Add.
type Fault interface {
	match() *Match
	Name() string // the type's name, as Stats.Faults counts it
}

// DropMidReply forwards the first After bytes of a matching reply (not all
// of it), then closes both sides; with Reset, by a TCP reset.
type DropMidReply struct {
	Match
	After int
	Reset bool
}

// DropAndLose forwards a matching command, swallows its reply and closes
// both sides; commands sent after it are not forwarded.
type DropAndLose struct{ Match }

// DropRequest closes both sides when a matching command's turn comes,
// without forwarding it; the replies before it are delivered first.
type DropRequest struct{ Match }

// ExtraReply injects Reply (or Raw, RESP or not) before or after the reply
// to a matching command, so that the client's replies are one off.
type ExtraReply struct {
	Match
	Reply  Value
	Raw    []byte
	Before bool
}

// HoldReplies delivers each matching reply Delay after it came; the
// replies behind it wait too.
type HoldReplies struct {
	Match
	Delay time.Duration
}

// Freeze holds matching replies (with Requests, commands and all after
// them, as a stalled Redis) until Rule.Release, then delivers them in order.
type Freeze struct {
	Match
	Requests bool
}

// SlowHandshake delays the replies to each connection's First commands by
// Delay, and its dial to Redis by AcceptDelay. It is decided per accepted
// connection: Conn, NextConns, Skip and Times count connections, and
// Commands and Func narrow the commands it delays.
type SlowHandshake struct {
	Match
	First       int
	Delay       time.Duration
	AcceptDelay time.Duration
}

// SplitReplies writes matching replies in pieces of 1 to MaxChunk bytes
// (1 when 0), Gap apart; Seed makes the sizes repeatable.
type SplitReplies struct {
	Match
	MaxChunk int
	Gap      time.Duration
	Seed     uint64
}

// Error replies of Redis, worded as Redis words them, for ErrorReply.
const (
	BusyError     = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
	OOMError      = "OOM command not allowed when used memory > 'maxmemory'."
	ReadOnlyError = "READONLY You can't write against a read only replica."
	LoadingError  = "LOADING Redis is loading the dataset in memory"
	NoScriptError = "NOSCRIPT No matching script. Please use EVAL."
)

// ErrorReply answers matching commands with the error Err (BusyError,
// OOMError, ...) instead of forwarding them, in command order (at once on a
// RESP2 connection that subscribed).
type ErrorReply struct {
	Match
	Err string
}

func (f *DropMidReply) match() *Match  { return &f.Match }
func (f *DropAndLose) match() *Match   { return &f.Match }
func (f *DropRequest) match() *Match   { return &f.Match }
func (f *ExtraReply) match() *Match    { return &f.Match }
func (f *HoldReplies) match() *Match   { return &f.Match }
func (f *Freeze) match() *Match        { return &f.Match }
func (f *SlowHandshake) match() *Match { return &f.Match }
func (f *SplitReplies) match() *Match  { return &f.Match }
func (f *ErrorReply) match() *Match    { return &f.Match }

func (*DropMidReply) Name() string { return "DropMidReply" }

func (*DropAndLose) Name() string { return "DropAndLose" }

func (*DropRequest) Name() string { return "DropRequest" }

func (*ExtraReply) Name() string { return "ExtraReply" }

func (*HoldReplies) Name() string { return "HoldReplies" }

func (*Freeze) Name() string { return "Freeze" }

func (*SlowHandshake) Name() string { return "SlowHandshake" }

func (*SplitReplies) Name() string { return "SplitReplies" }

func (*ErrorReply) Name() string { return "ErrorReply" }

// Rule is a fault added to a Proxy or a Set, safe for concurrent use.
type Rule struct {
	fault Fault
	set   *ruleSet
	m     Match // a copy: the caller may reuse its Fault

	mu         sync.Mutex
	seen       int            // matches counted for Skip and Times
	claims     map[int64]bool // connections claimed with NextConns
	claimsLeft int
	rng        *rand.Rand // SplitReplies' piece sizes

	applied  atomic.Int64
	released chan struct{} // closed by Release
	spent    chan struct{} // closed when Times is used up
	once     sync.Once
	spentMu  sync.Once
}

func newRule(f Fault, set *ruleSet) *Rule {
	r := &Rule{
		fault:    f,
		set:      set,
		m:        *f.match(),
		released: make(chan struct{}),
		spent:    make(chan struct{}),
	}
	r.claimsLeft = r.m.NextConns
	if r.m.NextConns > 0 {
		r.claims = map[int64]bool{}
	}
	if s, ok := f.(*SplitReplies); ok {
		r.rng = rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	}
	return r
}

// Fault returns the fault the rule applies.
func (r *Rule) Fault() Fault { return r.fault }

// Applied returns how many times the fault has applied.
func (r *Rule) Applied() int64 { return r.applied.Load() }

// Done is closed when the fault has applied Match.Times times, or on Release.
func (r *Rule) Done() <-chan struct{} { return r.spent }

// Release removes the rule and delivers what it holds at once. It is
// idempotent.
func (r *Rule) Release() {
	r.once.Do(func() {
		r.set.remove(r)
		close(r.released)
		r.spentMu.Do(func() { close(r.spent) })
	})
}

// Remove is Release.
func (r *Rule) Remove() { r.Release() }

func (r *Rule) isReleased() bool {
	select {
	case <-r.released:
		return true
	default:
		return false
	}
}

// claim gives the rule connection id if it still wants one (NextConns).
func (r *Rule) claim(id int64) {
	if r.m.NextConns == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claimsLeft > 0 {
		r.claims[id] = true
		r.claimsLeft--
	}
}

// matchConn reports whether the rule applies to connection id at all.
func (r *Rule) matchConn(id int64) bool {
	if r.m.Conn != 0 && r.m.Conn != id {
		return false
	}
	if r.m.NextConns > 0 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.claims[id]
	}
	return true
}

// takeConn decides whether SlowHandshake applies to connection id.
func (r *Rule) takeConn(id int64) bool {
	if r.isReleased() || !r.matchConn(id) {
		return false
	}
	return r.count()
}

// take decides whether the rule applies to cmd (nil: a reply to no
// command) on connection id, and counts it.
func (r *Rule) take(id int64, cmd *Command) bool {
	if r.isReleased() || !r.matchConn(id) || !r.m.matchCommand(cmd) {
		return false
	}
	return r.count()
}

// count counts a match and reports whether the fault applies to it.
func (r *Rule) count() bool {
	r.mu.Lock()
	r.seen++
	seen := r.seen
	r.mu.Unlock()
	if seen <= r.m.Skip {
		return false
	}
	if r.m.Times > 0 {
		if seen > r.m.Skip+r.m.Times {
			return false
		}
		if seen == r.m.Skip+r.m.Times {
			defer r.spentMu.Do(func() { close(r.spent) })
		}
	}
	r.applied.Add(1)
	return true
}

// chunk returns the size of SplitReplies' next piece.
func (r *Rule) chunk(maxChunk int) int {
	if maxChunk <= 1 {
		return 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return 1 + r.rng.IntN(maxChunk)
}

// ruleSet is a Proxy's, or a Set's, rules in the order they were added.
type ruleSet struct {
	mu    sync.Mutex
	rules atomic.Pointer[[]*Rule] // copy on write
}

func (s *ruleSet) add(f Fault) *Rule {
	r := newRule(f, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.list()
	rules := append(append(make([]*Rule, 0, len(old)+1), old...), r)
	s.rules.Store(&rules)
	return r
}

func (s *ruleSet) remove(r *Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.list()
	rules := make([]*Rule, 0, len(old))
	for _, x := range old {
		if x != r {
			rules = append(rules, x)
		}
	}
	s.rules.Store(&rules)
}

func (s *ruleSet) list() []*Rule {
	if s == nil {
		return nil
	}
	if p := s.rules.Load(); p != nil {
		return *p
	}
	return nil
}

// clear releases every rule.
func (s *ruleSet) clear() {
	for _, r := range s.list() {
		r.Release()
	}
}
