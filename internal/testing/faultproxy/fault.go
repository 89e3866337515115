package faultproxy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Match selects what a fault applies to. Its zero value matches every
// command on every connection, every time. Faults are decided when the
// proxy reads a command from a client, so a fault added while a command is
// in flight does not apply to that command's reply. A reply that answers
// no command (a RESP3 push, a message on a RESP2 connection that
// subscribed, an unsolicited reply) is matched when it arrives, by the
// faults whose Match names no command (no Commands, FirstCommands or
// Func).
type Match struct {
	// Commands lists command names in any case ("EVALSHA"); a name with
	// a space also names the subcommand ("CLUSTER SLOTS"). Empty matches
	// every command.
	Commands []string
	// FirstCommands, when above 0, matches only each connection's first
	// FirstCommands commands: its handshake (AUTH, HELLO, SELECT...).
	FirstCommands int
	// Func, when set, must also return true. It runs on the proxy's
	// goroutines, and must not block.
	Func func(*Command) bool
	// Conn, when not 0, matches only the connection with this ID (see
	// Proxy.Conns).
	Conn int64
	// NextConns, when above 0, matches only the next NextConns
	// connections the proxy accepts after the fault is added.
	NextConns int
	// Skip lets this many matches through before the fault applies.
	Skip int
	// Times, when above 0, is how many times the fault applies; then it
	// is spent (Rule.Done) and matches nothing more.
	Times int
}

// Nth matches the nth command (from 1) among those named by commands
// (every command when there are none), counted across the connections
// the fault applies to, once.
func Nth(n int, commands ...string) Match {
	return Match{Commands: commands, Skip: max(n-1, 0), Times: 1}
}

// commandFree reports whether m can match a reply that answers no command
// (a RESP3 push, a pub/sub message, an unsolicited reply).
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

// A Fault is one of the fault types of this package; add it to a Proxy
// or a Group with Add.
type Fault interface {
	match() *Match
	// Name is the fault's type name, as Stats.Faults counts it.
	Name() string
}

// DropMidReply forwards the first After bytes of a matching reply (at most
// all but its last byte), then closes both sides: the client sees its
// connection end in the middle of a reply to a command Redis ran. With
// Reset the close is a TCP reset, and the client may not see the bytes.
type DropMidReply struct {
	Match
	After int
	Reset bool
}

// DropAndLose forwards a matching command to Redis, which runs it, then
// swallows its reply and closes both sides: the client never learns the
// outcome. Commands the client sent after it are not forwarded.
type DropAndLose struct{ Match }

// DropRequest is DropAndLose's twin: it closes both sides when a matching
// command's turn comes, without forwarding it, so Redis never runs it.
// Replies to the commands before it are delivered first.
type DropRequest struct{ Match }

// ExtraReply injects Reply (or the bytes Raw, when set, even if they are
// not RESP) before or after the reply to a matching command: from then on
// the client's replies are one off.
type ExtraReply struct {
	Match
	Reply  Value
	Raw    []byte
	Before bool
}

// HoldReplies delivers each matching reply no sooner than Delay after it
// came from Redis. Replies keep their order, so the replies behind a held
// one wait too.
type HoldReplies struct {
	Match
	Delay time.Duration
}

// Freeze holds matching replies (or, with Requests, matching commands
// before they reach Redis, as a stalled Redis would) until the rule is
// released (Rule.Release), then delivers them in order.
type Freeze struct {
	Match
	Requests bool
}

// SlowHandshake delays the replies to the First commands of each
// connection (AUTH, HELLO, SELECT...) by Delay; AcceptDelay, when set,
// also waits that long before it dials Redis for a new connection (a slow
// TCP or TLS accept). It is decided when a connection is accepted: its
// Conn, NextConns, Skip and Times count connections, and its
// Match.Commands and Func narrow the handshake commands it delays.
type SlowHandshake struct {
	Match
	First       int
	Delay       time.Duration
	AcceptDelay time.Duration
}

// SplitReplies writes matching replies in pieces of 1 to MaxChunk bytes
// (1 when 0), with Gap between pieces, so that the client reads partial
// replies. Seed makes the piece sizes repeatable.
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

// ErrorReply answers matching commands with the error reply Err (such as
// BusyError, OOMError, ReadOnlyError, LoadingError or NoScriptError)
// instead of forwarding them: Redis never
// sees them. Rule.Applied counts the fakes. A fake goes out in command
// order, except on a RESP2 connection that has subscribed, where replies
// no longer pair with commands and it goes out at once.
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

// Name implements Fault.
func (*DropMidReply) Name() string { return "DropMidReply" }

// Name implements Fault.
func (*DropAndLose) Name() string { return "DropAndLose" }

// Name implements Fault.
func (*DropRequest) Name() string { return "DropRequest" }

// Name implements Fault.
func (*ExtraReply) Name() string { return "ExtraReply" }

// Name implements Fault.
func (*HoldReplies) Name() string { return "HoldReplies" }

// Name implements Fault.
func (*Freeze) Name() string { return "Freeze" }

// Name implements Fault.
func (*SlowHandshake) Name() string { return "SlowHandshake" }

// Name implements Fault.
func (*SplitReplies) Name() string { return "SplitReplies" }

// Name implements Fault.
func (*ErrorReply) Name() string { return "ErrorReply" }

// Rule is a fault added to a Proxy or a Group. Its methods are safe for
// concurrent use.
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

// Applied returns how many times the fault has applied: replies dropped,
// held, split or faked, extra replies sent, commands held or dropped.
func (r *Rule) Applied() int64 { return r.applied.Load() }

// Done returns a channel that is closed when a fault with Match.Times has
// applied that many times, or when the rule is released.
func (r *Rule) Done() <-chan struct{} { return r.spent }

// Release removes the rule: it matches nothing more, and what it holds
// (Freeze, HoldReplies) is delivered at once. Calling it again does
// nothing.
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

// takeConn decides whether a connection-level rule (SlowHandshake)
// applies to connection id, counting connections for Skip and Times.
func (r *Rule) takeConn(id int64) bool {
	if r.isReleased() || !r.matchConn(id) {
		return false
	}
	return r.count()
}

// take decides whether the rule applies to cmd (nil for a reply that
// answers no command) on connection id, and counts the match for Skip and
// Times and, when it applies, in Applied.
func (r *Rule) take(id int64, cmd *Command) bool {
	if r.isReleased() || !r.matchConn(id) || !r.m.matchCommand(cmd) {
		return false
	}
	return r.count()
}

// count counts one match for Skip and Times and reports whether the
// fault applies to it.
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

// ruleSet is the rules of a Proxy, or those a Group shares with its
// proxies, in the order they were added.
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
