package faultproxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Options configure a Proxy.
type Options struct {
	// Upstream is the host:port of the real server.
	Upstream string
	// Listen is the address to listen on; "127.0.0.1:0" (a free loopback
	// port) when empty.
	Listen string
	// TLS, when set, makes the proxy accept TLS from clients (it reads the
	// plain RESP inside); UpstreamTLS, when set, makes it dial the
	// upstream with TLS.
	TLS, UpstreamTLS *tls.Config
	// DialTimeout bounds the dial to the upstream; 5 s when 0.
	DialTimeout time.Duration
	// MaxValue bounds one command or reply, in bytes; DefaultMaxValue
	// when 0. A larger one closes the connection.
	MaxValue int
	// Logf, when set, receives a line for each connection the proxy ends
	// on its own (a fault, a malformed value, a failed dial).
	Logf func(format string, args ...any)
}

// Proxy is a fault-injecting TCP proxy between Redis clients and one
// Redis server (or sentinel). Each client connection gets its own
// upstream connection. Its methods are safe for concurrent use.
type Proxy struct {
	o      Options
	ln     net.Listener
	addr   string
	rules  *ruleSet
	shared *ruleSet // a Group's rules, or nil
	mapper atomic.Pointer[func(string) (string, bool)]

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu          sync.Mutex
	conns       map[int64]*conn
	refuseUntil time.Time
	refuseAll   bool
	byName      map[string]int64
	faults      map[string]int64

	accepted, refused, forwarded, faked, dropped, replies, unpaired, holding atomic.Int64
}

// New starts a proxy to upstream on a free loopback port, and closes it
// when t ends. It fails t if it cannot listen.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	return NewWith(t, Options{Upstream: upstream})
}

// NewWith is New with options; o.Logf defaults to t.Logf.
func NewWith(t testing.TB, o Options) *Proxy {
	t.Helper()
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	p, err := Start(o)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Start starts a proxy: it listens, and accepts connections until Close.
func Start(o Options) (*Proxy, error) {
	p, err := start(o, nil)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func start(o Options, shared *ruleSet) (*Proxy, error) {
	if o.Upstream == "" {
		return nil, errors.New("no upstream address")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.MaxValue <= 0 {
		o.MaxValue = DefaultMaxValue
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen for %s: %w", o.Upstream, err)
	}
	p := &Proxy{
		o:      o,
		ln:     ln,
		addr:   ln.Addr().String(),
		rules:  &ruleSet{},
		shared: shared,
		closed: make(chan struct{}),
		conns:  map[int64]*conn{},
		byName: map[string]int64{},
		faults: map[string]int64{},
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's host:port, for clients.
func (p *Proxy) Addr() string { return p.addr }

// Upstream returns the address of the server behind the proxy.
func (p *Proxy) Upstream() string { return p.o.Upstream }

// Add starts applying fault f and returns its rule; Rule.Release stops
// it. Rules apply in the order they were added (a Group's after the
// proxy's own). f must not be changed afterwards.
func (p *Proxy) Add(f Fault) *Rule { return p.rules.add(f) }

// Clear releases every rule added with Add.
func (p *Proxy) Clear() { p.rules.clear() }

// SetAddrMap makes the proxy rewrite upstream addresses into the
// addresses clients should use, in the replies that carry topology: those
// of CLUSTER and SENTINEL commands, MOVED and ASK errors, and pub/sub
// messages (+switch-master). m maps "host:port" to "host:port"; nil stops
// rewriting. A Group sets this for its proxies.
func (p *Proxy) SetAddrMap(m map[string]string) {
	if m == nil {
		p.mapper.Store(nil)
		return
	}
	m = maps.Clone(m)
	f := func(addr string) (string, bool) {
		to, ok := m[addr]
		return to, ok
	}
	p.mapper.Store(&f)
}

func (p *Proxy) setMapper(f func(string) (string, bool)) { p.mapper.Store(&f) }

// CutAll closes every current connection with a TCP reset, and with
// refuseFor above 0 refuses new ones for that long (each is accepted and
// reset at once, as an unreachable Redis would answer).
func (p *Proxy) CutAll(refuseFor time.Duration) {
	if refuseFor > 0 {
		p.mu.Lock()
		p.refuseUntil = time.Now().Add(refuseFor)
		p.mu.Unlock()
	}
	conns := p.connList()
	for _, c := range conns {
		c.close(true, "")
	}
	p.logf("cut %d connections, refusing new ones for %v", len(conns), refuseFor)
}

// CutConn closes the connection with ID id with a TCP reset, and reports
// whether it was open.
func (p *Proxy) CutConn(id int64) bool {
	p.mu.Lock()
	c := p.conns[id]
	p.mu.Unlock()
	if c == nil {
		return false
	}
	c.close(true, "cut")
	return true
}

// Refuse resets every new connection until Allow; existing ones go on.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refuseAll = true
	p.mu.Unlock()
}

// Allow ends Refuse, and a refusal period CutAll started.
func (p *Proxy) Allow() {
	p.mu.Lock()
	p.refuseAll = false
	p.refuseUntil = time.Time{}
	p.mu.Unlock()
}

func (p *Proxy) refusing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refuseAll || time.Now().Before(p.refuseUntil)
}

// ConnInfo describes one open connection.
type ConnInfo struct {
	// ID names the connection in Match.Conn and CutConn; IDs grow with
	// each connection accepted, and are unique across all proxies.
	ID int64
	// Client is the client's address.
	Client string
	// Commands is how many commands the client has sent on it.
	Commands int64
	// Opened is when the proxy accepted it.
	Opened time.Time
}

// Conns lists the open connections, oldest first.
func (p *Proxy) Conns() []ConnInfo {
	var out []ConnInfo
	for _, c := range p.connList() {
		out = append(out, ConnInfo{ID: c.id, Client: c.clientAddr, Commands: c.ncmd.Load(), Opened: c.opened})
	}
	return out
}

func (p *Proxy) connList() []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*conn, 0, len(p.conns))
	for _, c := range p.conns {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// Stats counts what went through a proxy since it started, to check a
// client's answers against what Redis really did.
type Stats struct {
	// Accepted and Refused count client connections; Open is how many
	// are open now.
	Accepted, Refused, Open int64
	// Forwarded counts the commands sent to the upstream; Commands counts
	// them by name ("INCR", "EVALSHA").
	Forwarded int64
	Commands  map[string]int64
	// Faked counts the commands ErrorReply answered, and Dropped those
	// DropRequest kept back; the upstream saw neither. (Commands a client
	// pipelined behind a DropRequest or a DropAndLose are neither read
	// nor counted.)
	Faked, Dropped int64
	// Replies counts the replies delivered whole to clients, faked and
	// extra ones included; Unpaired counts those among them that
	// answered no command (pushes, pub/sub messages, extras).
	Replies, Unpaired int64
	// Holding is how many replies HoldReplies, Freeze and SlowHandshake
	// hold back now.
	Holding int64
	// Faults counts the faults applied, by Fault.Name.
	Faults map[string]int64
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Accepted:  p.accepted.Load(),
		Refused:   p.refused.Load(),
		Open:      int64(len(p.conns)),
		Forwarded: p.forwarded.Load(),
		Commands:  maps.Clone(p.byName),
		Faked:     p.faked.Load(),
		Dropped:   p.dropped.Load(),
		Replies:   p.replies.Load(),
		Unpaired:  p.unpaired.Load(),
		Holding:   p.holding.Load(),
		Faults:    maps.Clone(p.faults),
	}
}

// Forwarded returns how many commands named name (in any case) the proxy
// sent to the upstream.
func (p *Proxy) Forwarded(name string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byName[upper(name)]
}

func (p *Proxy) countForward(name string) {
	p.forwarded.Add(1)
	p.mu.Lock()
	p.byName[name]++
	p.mu.Unlock()
}

func (p *Proxy) countFault(f Fault) {
	p.mu.Lock()
	p.faults[f.Name()]++
	p.mu.Unlock()
}

func (p *Proxy) logf(format string, args ...any) {
	if p.o.Logf != nil {
		p.o.Logf("faultproxy %s->%s: "+format, append([]any{p.addr, p.o.Upstream}, args...)...)
	}
}

// Close stops listening, closes every connection, releases what faults
// hold, and waits until all of the proxy's goroutines have returned. It
// does not release the rules. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		_ = p.ln.Close()
		for _, c := range p.connList() {
			c.close(false, "")
		}
	})
	p.wg.Wait()
	return nil
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			p.logf("accept: %v", err)
			return
		}
		if p.refusing() {
			p.refused.Add(1)
			reset(nc)
			continue
		}
		p.accepted.Add(1)
		c := p.newConn(nc)
		if c == nil {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			c.run()
		}()
	}
}

// rules returns the rules that apply to the proxy's traffic.
func (p *Proxy) ruleList() []*Rule {
	own, shared := p.rules.list(), p.shared.list()
	if len(shared) == 0 {
		return own
	}
	return append(append(make([]*Rule, 0, len(own)+len(shared)), own...), shared...)
}

// reset closes nc with a TCP reset rather than a FIN.
func reset(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}
